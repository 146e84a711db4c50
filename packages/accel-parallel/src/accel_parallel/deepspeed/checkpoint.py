"""DeepSpeed's own engine checkpoint, written inside accel-checkpoint's commit protocol.

:class:`DeepSpeedWriter` is a :class:`~accel_state.protocols.RankCheckpointWriter`: every
rank calls ``engine.save_checkpoint`` into ``<staging>/deepspeed`` (tag = the model's
entry name, ``model``, ``model_1``, ...) and reports the files it wrote — rank ``r`` the
``*zero_pp_rank_<r>_*`` partitions, rank 0 everything else (the module states, DeepSpeed's
``zero_to_fp32.py``) — so that accel-checkpoint hashes them, lists them in the manifest
and commits the directory with one atomic rename, with the schedulers, data positions and
RNG states beside them. Loading runs only after every byte was verified, then calls
``engine.load_checkpoint``. ZeRO partitions saved by another number of processes (which
DeepSpeed refuses, and only after loading the weights) are joined into the full state and
cut along this engine's partitions by accel (:mod:`~accel_parallel.deepspeed.reshape`), from
the same verified bytes through the same allow-list; an engine they cannot be cut into
(ZeRO-0, NVMe swapping) is refused before anything is read, naming the ways out.

Pickles: DeepSpeed's own checkpoint engine reads its ``.pt`` files with
``torch.load(weights_only=False)``. While loading, the writer swaps in a checkpoint engine
that reads them with ``torch.load(weights_only=True)`` under an allow-list of the few
DeepSpeed classes its checkpoints hold (:mod:`~accel_parallel.deepspeed.unpickle`), so the writer
declares ``unpickles = "restricted"``: no code of the file's choosing can run, and no
``trust_pickles`` is needed. A file with any other class is refused, naming it.

Verified bytes: every file DeepSpeed's ``load_checkpoint`` reads goes through that
checkpoint engine's ``load``; given ``read=`` (accel-checkpoint's per-rank loader passes
one, since the writer says ``reads_verified``), it unpickles the bytes ``read`` returned
after hash-checking them against the manifest, so a file changed after the verification
pass is refused instead of loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from accel_state import ConfigurationError, DistributedError
from accel_state.protocols import UNPICKLES_RESTRICTED

from accel_parallel.deepspeed.unpickle import VerifiedRead, restricted_load

__all__ = ["DeepSpeedWriter", "DEEPSPEED_LAYOUT", "DEEPSPEED_DIR"]

#: ``manifest.json`` ``layout`` of a DeepSpeed checkpoint
DEEPSPEED_LAYOUT = "deepspeed"
#: the folder of the checkpoint that holds DeepSpeed's own files
DEEPSPEED_DIR = "deepspeed"
_RANK_FILE = re.compile(r"(?:^|_)zero_pp_rank_(\d+)_")


class _RestrictedEngine:
    """DeepSpeed's checkpoint engine with its ``load`` replaced by
    :func:`~accel_parallel.deepspeed.unpickle.restricted_load`."""

    def __init__(self, inner: Any, read: VerifiedRead | None = None) -> None:
        self._inner = inner
        self._read = read

    def load(self, path: Any, map_location: Any = None) -> Any:
        return restricted_load(path, map_location, self._read)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)


def _needs_reshape(path: Path, folder: Path, engine: Any, with_optimizer: bool,
                   world_size: int) -> bool:
    """Whether ``folder`` holds ZeRO partitions of another number of processes that this
    engine must take (its optimizer state, or ZeRO-3's partitioned weights): then accel
    repartitions them itself (:mod:`~accel_parallel.deepspeed.reshape`), since DeepSpeed
    refuses, and only after it has loaded the weights. What cannot be repartitioned is
    refused here, before anything is read. ZeRO-3 weights loaded without the optimizer go
    through accel at any number of processes."""
    from accel_parallel.deepspeed.reshape import reshape_refusal

    ranks = {int(m.group(1)) for p in folder.iterdir() if (m := _RANK_FILE.search(p.name))}
    saved = max(ranks) + 1 if ranks else None
    current = getattr(engine, "dp_world_size", world_size)
    stage3 = engine.zero_optimization_stage() == 3
    if saved is None or not (with_optimizer or stage3):
        return False  # no partitions, or the module alone: DeepSpeed reads it at any size
    why = reshape_refusal(engine, with_optimizer)
    if saved == current:
        # ZeRO-3 weights alone: DeepSpeed would read them with zero_to_fp32 (a full
        # unpickler, and a 'latest' file accel does not write), so accel does
        return stage3 and not with_optimizer and why is None
    if why is None:
        return True
    raise ConfigurationError(
        f"{path} holds DeepSpeed ZeRO state of {folder.name!r} partitioned over {saved} "
        f"process(es), but this run has {current}, and accel cannot repartition it onto this "
        f"engine: {why}. Nothing was loaded. Resume it with "
        f"{saved} processes (accel launch --num_processes {saved}), or load it into models "
        "prepared without DeepSpeed (DDP or FSDP2 read ZeRO-1/2/3 partitions of any number of "
        "processes, the optimizer state included), or take its full fp32 weights with "
        f"`accel merge-weights {path} OUT --trust_pickles` and load them with "
        "load_checkpoint_in_model(model, OUT) before accelerator.prepare (the optimizer "
        "state then starts afresh).")


_INTO_ENGINES = (
    "{path} is a {saved} checkpoint (saved by {world} process(es)), but the prepared models "
    "are DeepSpeed engines, which load only DeepSpeed's own checkpoints. Load its weights "
    "into the model before accelerator.prepare ({how}; the optimizer state then starts "
    "afresh), or prepare the models without DeepSpeed to resume it whole.")


class DeepSpeedWriter:
    """Saves and loads DeepSpeed engines: the DeepSpeed strategy's, by plugin name (the
    strategy's live mapping, so engines prepared later are seen; the writer needs nothing
    else of the strategy, and does not import it)."""

    layout = DEEPSPEED_LAYOUT
    unpickles = UNPICKLES_RESTRICTED
    reads_verified = True
    """``load`` takes ``read=`` (a :data:`VerifiedRead`): DeepSpeed then unpickles the
    bytes that were hash-checked, not the file opened again."""
    loads_non_strict = True
    """``load`` takes ``non_strict=`` (entry names: ``load_module_strict=False``)."""
    load_refusals = {saved: _INTO_ENGINES.replace("{how}", how) for saved, how in (
        ("replicated", "load_checkpoint_in_model(model, '{path}')"),
        ("sharded", "`accel merge-weights {path} OUT`, then load_checkpoint_in_model(model, OUT)"))}
    """What a checkpoint of another layout gets instead of a load into DeepSpeed engines."""

    def __init__(self, engines: Mapping[str, Any] | None = None) -> None:
        # no engines: the writer registered for reading (full_states) only
        self.engines = engines if engines is not None else {}

    def _engine_of(self, obj: Any) -> Any | None:
        for engine in self.engines.values():
            if obj is engine or obj is engine.module:
                return engine
        return None

    def _owner_of_optimizer(self, obj: Any) -> Any | None:
        inner = getattr(obj, "optimizer", obj)
        for engine in self.engines.values():
            if inner is engine.optimizer or obj is engine.optimizer:
                return engine
        return None

    def _engines(self, objects: Mapping[str, Any]) -> dict[str, Any]:
        """The engine of each model entry; every optimizer must belong to one of them."""
        engines: dict[str, Any] = {}
        for name, obj in objects.items():
            if isinstance(obj, torch.nn.Module):
                engine = self._engine_of(obj)
                if engine is None:
                    raise ConfigurationError(
                        f"Checkpoint entry {name!r} ({type(obj).__name__}) was not prepared by "
                        "DeepSpeed: with a DeepSpeed strategy every model goes through "
                        "accelerator.prepare.")
                engines[name] = engine
        owned = {id(e) for e in engines.values()}
        for name, obj in objects.items():
            if not isinstance(obj, torch.nn.Module):
                engine = self._owner_of_optimizer(obj)
                if engine is None or id(engine) not in owned:
                    raise ConfigurationError(
                        f"Checkpoint entry {name!r} ({type(obj).__name__}) is not the optimizer of "
                        "a DeepSpeed engine saved with it: DeepSpeed saves an optimizer with its "
                        "model, so save the model in the same checkpoint.")
        return engines

    def save(self, staging: Path, objects: Mapping[str, Any], rank: int,
             world_size: int) -> list[str]:
        root = Path(staging) / DEEPSPEED_DIR
        for tag, engine in self._engines(objects).items():
            engine.save_checkpoint(str(root), tag=tag, save_latest=False)
        mine = []
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            if not path.is_file():
                continue
            match = _RANK_FILE.search(path.name)
            owner = int(match.group(1)) if match else 0
            if owner == rank:
                mine.append(path.relative_to(staging).as_posix())
        return mine

    def load(self, path: Path, objects: Mapping[str, Any], rank: int, world_size: int, *,
             read: VerifiedRead | None = None, non_strict: Any = ()) -> None:
        root = Path(path) / DEEPSPEED_DIR
        engines = self._engines(objects)
        with_optimizer = {id(self._owner_of_optimizer(o)) for o in objects.values()
                          if not isinstance(o, torch.nn.Module)}
        reshaped = set()
        for tag, engine in engines.items():  # every engine checked before any loads
            if not (root / tag).is_dir():
                raise ConfigurationError(f"{path} holds no DeepSpeed checkpoint for {tag!r} "
                                         f"(no {DEEPSPEED_DIR}/{tag}/).")
            if _needs_reshape(path, root / tag, engine, id(engine) in with_optimizer,
                              world_size):
                reshaped.add(tag)
        for tag, engine in engines.items():
            if tag in reshaped:
                self._load_reshaped(path, root / tag, engine, read,
                                    with_optimizer=id(engine) in with_optimizer,
                                    strict=tag not in non_strict)
                continue
            original = engine.checkpoint_engine
            engine.checkpoint_engine = _RestrictedEngine(original, read)
            try:
                loaded, _ = engine.load_checkpoint(
                    str(root), tag=tag, load_optimizer_states=id(engine) in with_optimizer,
                    load_lr_scheduler_states=True, load_module_strict=tag not in non_strict)
            finally:
                engine.checkpoint_engine = original
            if loaded is None:
                raise DistributedError(f"DeepSpeed could not load {root / tag} on rank {rank}.")

    @staticmethod
    def _load_reshaped(path: Path, folder: Path, engine: Any, read: VerifiedRead | None, *,
                       with_optimizer: bool, strict: bool) -> None:
        """ZeRO state of another number of processes: joined from the (verified) files,
        then cut along this engine's partitions."""
        from accel_parallel.deepspeed.reshape import load_into_engine
        from accel_parallel.deepspeed.states import read_zero_checkpoint

        saved = read_zero_checkpoint(folder, read)
        load_into_engine(path, engine, saved, with_optimizer=with_optimizer, strict=strict)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The model's full weights on rank 0 (``{}`` elsewhere), on the CPU, in the
        engine's dtype (bf16 weights stay bf16). ZeRO-3 parameters are gathered one layer
        at a time and kept on rank 0 only (DeepSpeed's own gather for its 16-bit save), so
        no rank ever holds the whole model on its device: a collective, call it on every
        rank."""
        engine = self._engine_of(model)
        if engine is None:
            raise ConfigurationError(f"{type(model).__name__} was not prepared by DeepSpeed.")
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if engine.zero_optimization_stage() == 3:
            state = engine._zero3_consolidated_16bit_state_dict()
            if rank != 0 or state is None:
                return {}
            if engine.device.type != "cpu":
                return dict(state)  # already copied off the device
            # on the CPU the tensors may alias DeepSpeed's gather buffers: own copies,
            # tied weights kept tied
            copies: dict[int, torch.Tensor] = {}
            for value in state.values():
                if id(value) not in copies:
                    copies[id(value)] = value.clone()
            return {k: copies[id(v)] for k, v in state.items()}
        if rank != 0:
            return {}
        return {k: v.detach().to("cpu", copy=True) for k, v in engine.module.state_dict().items()}

    def full_states(self, path: Path, names: list[str], owners: Mapping[str, str],
                    listed: set[str], read: VerifiedRead) -> dict[str, Any]:
        """The full states of the saved engines' objects ``names`` (ZeRO's partitions joined
        by :func:`~accel_parallel.deepspeed.states.read_zero_full_states`), for models that
        are not DeepSpeed engines: only from files in ``listed``, each unpickled from the
        bytes ``read`` hash-checked. An optimizer is saved with its model's engine
        (``owners``: optimizer name -> model name)."""
        from accel_parallel.deepspeed.states import read_zero_full_states

        read_tags: dict[str, Any] = {}
        states: dict[str, Any] = {}
        for name in names:
            tag = owners.get(name, name)
            if tag not in read_tags:
                folder = Path(path) / DEEPSPEED_DIR / tag
                if not folder.is_dir():
                    raise ConfigurationError(
                        f"{path} holds no DeepSpeed checkpoint for {tag!r} (no "
                        f"{DEEPSPEED_DIR}/{tag}/): load it with the models named as when "
                        "it was saved.")
                unlisted = sorted(p.name for p in folder.iterdir() if p.is_file()
                                  and p.relative_to(path).as_posix() not in listed)
                if unlisted:
                    raise ConfigurationError(f"{folder} holds files its manifest does not "
                                             f"list ({', '.join(unlisted[:5])}): remove them.")
                read_tags[tag] = read_zero_full_states(folder, read)
            weights, optimizer = read_tags[tag]
            if name not in owners:
                states[name] = weights
            elif optimizer is not None:
                states[name] = optimizer
        return states

    def __repr__(self) -> str:
        return f"DeepSpeedWriter(engines={list(self.engines)})"

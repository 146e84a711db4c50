"""Sharded checkpoints of sharded models (FSDP2 ``fully_shard``, DTensor) through DCP.

Every rank writes only its own shards with ``torch.distributed.checkpoint`` (DCP), into
the same staging directory ``<name>.tmp-<id>/`` the replicated format uses; each rank
hashes the files it wrote, rank 0 lists them all in ``manifest.json`` (``layout:
"sharded"``) and commits with the same atomic rename. Loading checks every sha256 first
(the ranks share the hashing), then reads DCP's pickled ``.metadata`` through an
allow-list unpickler (:mod:`accel_checkpoint.dcp_io`). Model and optimizer state go
through ``torch.distributed.checkpoint.state_dict`` (``get_model_state_dict`` /
``get_optimizer_state_dict`` and their ``set_`` twins), so a checkpoint loads into a
model sharded over a different number of processes too.

Objects whose state is the same on every rank (schedulers, dataloader positions, counters:
``replicated=``) are written whole by rank 0 as safetensors + JSON, exactly as the
replicated format does, and come back whole: DCP would only fill the keys a freshly built
object already has. With ``rng=True`` each rank writes its own RNG states. A
``prepare_dir`` callable may add files to the staging directory (a save pre-hook's
``save_pretrained``); they are listed in the manifest and hash-checked like the rest.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from accel_state.random import restore_rng_state

from accel_checkpoint.coordination import Peers, SaveRound, new_staging_dir
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.fileio import read_json, write_json
from accel_checkpoint.manager import read_object
from accel_checkpoint.hashing import FileRecord, Verification, hash_file, record_new_files
from accel_checkpoint.manifest import Manifest, library_versions, verify_checkpoint
from accel_checkpoint.saving import _commit, check_name, rng_name, snapshot, write_parts

__all__ = ["SHARDED_LAYOUT", "save_sharded_state", "load_sharded_state", "LoadedShardedState",
           "sharded_objects"]

#: ``manifest.json`` ``layout`` of a DCP checkpoint.
SHARDED_LAYOUT = "sharded"
#: Key of ``manifest.metadata`` naming the saved objects and their kinds.
OBJECTS_KEY = "sharded_objects"
_DATA_FILE = "_data.json"


def _dist() -> tuple[int, int, bool]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return 0, 1, False


def _broadcast(value: Any, on: bool) -> Any:
    """Rank 0's ``value`` on every rank (a small JSON-like object)."""
    if not on:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gather(value: Any, on: bool) -> list[Any]:
    if not on:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _kind(obj: Any) -> str:
    if isinstance(obj, nn.Module):
        return "model"
    if isinstance(obj, torch.optim.Optimizer):
        return "optimizer"
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return "stateful"
    raise CheckpointError(f"Cannot save {type(obj).__name__} in a sharded checkpoint: give "
                          "nn.Module, torch.optim.Optimizer or objects with state_dict()/"
                          "load_state_dict().")


def _owner(optimizer: torch.optim.Optimizer, models: dict[str, nn.Module]) -> nn.Module:
    """The model whose parameters ``optimizer`` updates (matched by identity)."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in models.values():
        if any(id(p) in params for p in model.parameters()):
            return model
    raise CheckpointError("An optimizer's parameters belong to none of the models given: "
                          "save the model it optimizes in the same call (its state is keyed "
                          "by the model's parameter names).")


def sharded_objects(objects: Mapping[str, Any]) -> dict[str, str]:
    """``name -> kind`` (``model``, ``optimizer``, ``stateful``), names checked."""
    return {check_name(name): _kind(obj) for name, obj in objects.items()}


def _state_dicts(objects: Mapping[str, Any], kinds: dict[str, str]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    models = {n: o for n, o in objects.items() if kinds[n] == "model"}
    state: dict[str, Any] = {}
    for name, obj in objects.items():
        if kinds[name] == "model":
            state[name] = get_model_state_dict(obj)
        elif kinds[name] == "optimizer":
            state[name] = get_optimizer_state_dict(_owner(obj, models), obj)
        else:
            state[name] = obj.state_dict()
    return state


def _apply(objects: Mapping[str, Any], kinds: dict[str, str], state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    models = {n: o for n, o in objects.items() if kinds[n] == "model"}
    for name, obj in objects.items():
        if kinds[name] == "model":
            set_model_state_dict(obj, state[name])
        elif kinds[name] == "optimizer":
            set_optimizer_state_dict(_owner(obj, models), obj, state[name])
        else:
            obj.load_state_dict(state[name])


def _describe(exc: BaseException) -> str:
    """One line per failed rank of a DCP ``CheckpointException`` (else the error itself)."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return f"{type(exc).__name__}: {exc}"
    lines = []
    for rank, pair in sorted(failures.items()):
        error = pair[0] if isinstance(pair, tuple) else pair
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        lines.append(f"rank {rank}: {type(error).__name__}: {first}")
    return "; ".join(lines)


def _record(path: Path) -> dict[str, Any]:
    return hash_file(path).to_json()


def _whole(replicated: Mapping[str, Any] | None, kinds: dict[str, str]) -> dict[str, Any]:
    """``replicated`` with its names checked (none may also name a DCP-saved object)."""
    whole = {check_name(name): obj for name, obj in (replicated or {}).items()}
    clash = sorted(set(whole) & set(kinds))
    if clash:
        raise CheckpointError(f"{clash} given both in objects and in replicated=: give each "
                              "name once (models and optimizers in objects, the rest in "
                              "replicated=).")
    bad = sorted(n for n, o in whole.items()
                 if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")))
    if bad:
        raise CheckpointError(f"replicated= entries {bad} have no state_dict()/"
                              "load_state_dict(): give objects that have both.")
    return whole


def _write_and_hash(staging: Path, state: dict[str, Any], data: Any, rank: int,
                    on: bool) -> dict[str, Any]:
    """DCP-save ``state`` into ``staging``; the records of the files this rank owns."""
    import torch.distributed.checkpoint as dcp

    from accel_checkpoint.dcp_io import DCP_METADATA_NAME

    writer = dcp.FileSystemWriter(staging, single_file_per_rank=True, sync_files=True)
    with warnings.catch_warnings():  # DCP warns that no_dist means one process: it does
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.save(state, storage_writer=writer, no_dist=not on)
    prefix = f"__{rank}_"
    files = {p.name: _record(p) for p in staging.iterdir() if p.name.startswith(prefix)}
    if rank == 0:
        if data is not None:
            files[_DATA_FILE] = write_json(staging / _DATA_FILE, data).to_json()
        if (staging / DCP_METADATA_NAME).is_file():
            files[DCP_METADATA_NAME] = _record(staging / DCP_METADATA_NAME)
    return files


def _prepare(prepare_dir: Callable[[Path], Any] | None, staging: Path) -> dict[str, Any]:
    """Run ``prepare_dir`` on this rank; ``{"error": ...}`` if it raised."""
    if prepare_dir is not None:
        try:
            prepare_dir(staging)
        except Exception as exc:
            return {"error": f"prepare_dir raised {type(exc).__name__}: {exc}"}
    return {}


def _listing(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


def _failure(results: list[dict[str, Any]]) -> str | None:
    return next((f"rank {r}: {o['error']}" for r, o in enumerate(results) if "error" in o),
                None)


def _manifest(staging: Path, results: list[dict[str, Any]], prepared: set[str],
              step: int | None, world: int, kinds: dict[str, str],
              metadata: dict[str, Any] | None) -> Manifest:
    """Rank 0: every rank's files and objects, plus what ``prepare_dir`` wrote."""
    files = {n: FileRecord.from_json(rec) for o in results for n, rec in o["files"].items()}
    objects = {n: entry for o in results for n, entry in o["objects"].items()}
    overwritten = sorted(prepared & set(files))
    if overwritten:
        raise CheckpointError(f"prepare_dir wrote {overwritten}, which the save itself writes: "
                              "give those files other names (or put them in a subdirectory).")
    files.update(record_new_files(staging, set(files)))
    ranks = sorted(e["rank"] for e in objects.values() if "rank" in e) or list(range(world))
    return Manifest(files=files, objects=objects, step=step, world_size=world, ranks=ranks,
                    layout=SHARDED_LAYOUT, created_unix=time.time(),
                    libraries=library_versions(),
                    metadata={**(metadata or {}), OBJECTS_KEY: kinds})


def save_sharded_state(directory: str | os.PathLike[str], objects: Mapping[str, Any], *,
                       data: Any = None, step: int | None = None,
                       metadata: dict[str, Any] | None = None,
                       replicated: Mapping[str, Any] | None = None, rng: bool = False,
                       prepare_dir: Callable[[Path], Any] | None = None,
                       on_commit: Callable[[Path], Any] | None = None) -> Path:
    """Save sharded ``objects`` (name -> model, optimizer or stateful) to ``directory``.

    A collective: call it on every rank. Each rank writes its own shards (DCP); rank 0
    writes ``data`` (JSON), the ``replicated`` objects (name -> object whose state is the
    same on every rank, written whole as safetensors + JSON) and the manifest, and renames
    the staging directory into place. ``rng``: each rank also writes its RNG states.
    ``prepare_dir(staging)`` runs on every rank once the staging directory exists and
    before any state is written; the files it creates there (subdirectories too) are
    committed with the checkpoint and listed in its manifest. ``on_commit(path)`` runs on
    rank 0 after the commit (rotation). Every rank returns the committed path, or raises
    if any rank failed (nothing is committed then, and the previous checkpoint at
    ``directory`` is untouched).
    """
    final = Path(directory)
    rank, world, on = _dist()
    kinds = sharded_objects(objects)
    whole = _whole(replicated, kinds)
    if on and not SaveRound(final, Peers.current()).everyone_arrived():
        raise CheckpointError(
            f"Only rank 0 entered the sharded save of {final} within "
            f"{SaveRound.peer_timeout()} s. A sharded checkpoint needs every process (each "
            "writes its own shards): call save_state on every process, not only on the main "
            "one (or raise ACCEL_CHECKPOINT_PEER_TIMEOUT if the others are just slow).")
    staging = Path(_broadcast(str(new_staging_dir(final)) if rank == 0 else None, on))
    error = _failure(_gather(_prepare(prepare_dir, staging), on))
    prepared = _listing(staging) if rank == 0 and error is None else set()
    results: list[dict[str, Any]] = []
    if error is None:
        try:
            files = _write_and_hash(staging, _state_dicts(objects, kinds), data, rank, on)
            part_files, entries = write_parts(staging, snapshot(whole, None, rng,
                                                                Peers(rank, world)))
            outcome: dict[str, Any] = {"files": {**files, **part_files}, "objects": entries}
        except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
            outcome = {"error": _describe(exc)}
        results = _gather(outcome, on)
        error = _failure(results)
    committed, hook_error = False, None
    if rank == 0 and error is None:
        try:
            _commit(staging, final, _manifest(staging, results, prepared, step, world, kinds,
                                              metadata))
            committed = True
        except Exception as exc:
            error = f"rank 0: {type(exc).__name__}: {exc}"
    if rank == 0 and not committed:
        shutil.rmtree(staging, ignore_errors=True)
    if rank == 0 and committed and on_commit is not None:
        try:
            on_commit(final)
        except Exception as exc:
            hook_error = f"{type(exc).__name__}: {exc}"
    error, hook_error = _broadcast([error, hook_error], on)
    if error is not None:
        raise CheckpointError(f"Sharded save of {final} failed, nothing was committed: {error}")
    if hook_error is not None:
        raise CheckpointError(f"{final} was committed, but on_commit failed on rank 0: "
                              f"{hook_error}")
    return final


@dataclass
class LoadedShardedState:
    """What :func:`load_sharded_state` found: the path, its manifest, the data, the step."""

    path: Path
    manifest: Manifest
    data: Any
    step: int | None


def _check_share(path: Path, manifest: Manifest, rank: int, world: int) -> str | None:
    """Hash this rank's share of the files; the first problem as text, else ``None``."""
    share = {name: manifest.files[name] for name in sorted(manifest.files)[rank::world]}
    try:
        Verification(path, share).wait()
    except CorruptCheckpointError as exc:
        return f"{exc.path}\0{exc.problem}"
    return None


def read_sharded_manifest(path: Path, rank: int = 0, world: int = 1,
                          on: bool = False) -> Manifest:
    """Verify a sharded checkpoint (every sha256, hashing shared by the ranks)."""
    manifest = verify_checkpoint(path, deep=False)
    if manifest.layout != SHARDED_LAYOUT:
        raise CheckpointError(f"{path} is a {manifest.layout!r} checkpoint, not a sharded one: "
                              "load it with load_checkpoint / Accelerator.load_state.")
    problems = [p for p in _gather(_check_share(path, manifest, rank, world), on) if p]
    if problems:
        where, what = sorted(problems)[0].split("\0", 1)
        raise CorruptCheckpointError(where, what)
    return manifest


def _rng_state(path: Path, manifest: Manifest, rank: int) -> Any:
    """This rank's saved RNG states (``None``, with a warning, when there are none)."""
    if rng_name(rank) in manifest.objects:
        return read_object(path, rng_name(rank), manifest)
    warnings.warn(f"{path} holds no RNG state for rank {rank} (saved by {manifest.world_size} "
                  "process(es)); this rank's random draws will differ from the original run.",
                  stacklevel=3)
    return None


def load_sharded_state(directory: str | os.PathLike[str], objects: Mapping[str, Any], *,
                       strict: bool = True, replicated: Mapping[str, Any] | None = None,
                       rng: bool = False) -> LoadedShardedState:
    """Verify ``directory`` and load it into ``objects`` (sharded like, or unlike, the save).

    A collective: call it on every rank with objects built (and sharded) the same way.
    The whole checkpoint is hash-checked before anything is read; a damaged file raises
    ``CorruptCheckpointError`` naming it, on every rank. ``replicated``: the objects saved
    with ``replicated=`` (each gets its saved state whole). ``rng``: restore this rank's
    RNG states (saved with ``rng=True``). ``strict``: every object must be in the
    checkpoint (else it is skipped with a warning).
    """
    import torch.distributed.checkpoint as dcp

    from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeLoadPlanner, VerifiedReader

    path = Path(directory)
    rank, world, on = _dist()
    manifest = read_sharded_manifest(path, rank, world, on)
    saved = dict(manifest.metadata.get(OBJECTS_KEY, {}))
    kinds = sharded_objects(objects)
    whole = _whole(replicated, kinds)
    missing = sorted(set(kinds) - set(saved)) + sorted(set(whole) - set(manifest.objects))
    if missing and strict:
        have = set(saved) | {n for n, e in manifest.objects.items() if e.get("kind") == "state"}
        raise CheckpointError(f"{path} has no object(s) {missing} (it has: "
                              f"{', '.join(sorted(have)) or 'none'}).")
    if missing:
        warnings.warn(f"{path} has no object(s) {missing}; they keep their state.", stacklevel=2)
    # Read what is not DCP first: nothing changes if a file turns out unreadable.
    states = {n: read_object(path, n, manifest) for n in whole if n in manifest.objects}
    rng_state = _rng_state(path, manifest, rank) if rng else None
    chosen = {n: o for n, o in objects.items() if n in saved}
    kinds = {n: kinds[n] for n in chosen}
    if chosen:
        state = _state_dicts(chosen, kinds)
        reader = VerifiedReader(path, manifest.files.get(DCP_METADATA_NAME))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            try:
                dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(),
                         no_dist=not on)
            except CheckpointException as exc:  # a BaseException: give it our type and a line
                raise CheckpointError(f"Could not load {path}: {_describe(exc)}") from exc
        _apply(chosen, kinds, state)
    for name, saved_state in states.items():
        whole[name].load_state_dict(saved_state)
    if rng_state is not None:
        restore_rng_state(rng_state)
    data = None
    if _DATA_FILE in manifest.files:
        data = read_json(path / _DATA_FILE, manifest.files[_DATA_FILE])
    return LoadedShardedState(path, manifest, data, manifest.step)

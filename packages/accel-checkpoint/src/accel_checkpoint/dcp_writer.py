"""``DCPWriter``: sharded models (FSDP2 ``fully_shard``, DTensor) through DCP, layout ``"sharded"``.

The worked example of a :class:`~accel_state.protocols.RankCheckpointWriter`. Every rank
writes only its own shards with ``torch.distributed.checkpoint`` (DCP) into the staging
directory (``__<rank>_0.distcp``; rank 0 also DCP's ``.metadata``) and reports those
files; :mod:`accel_checkpoint.per_rank` hashes them and commits. Model and optimizer
state go through ``torch.distributed.checkpoint.state_dict`` (``get_model_state_dict`` /
``get_optimizer_state_dict`` and their ``set_`` twins), so a checkpoint loads into a
model sharded over a different number of processes too. Loading reads DCP's pickled
``.metadata`` through an allow-list unpickler, hash-checked again on the very bytes it
unpickles, and DCP's non-tensor values with ``torch.load(weights_only=True)``
(:mod:`accel_checkpoint.dcp_io`): ``unpickles = "restricted"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from accel_state.protocols import UNPICKLES_RESTRICTED
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError

__all__ = ["DCPWriter", "SHARDED_LAYOUT", "describe_dcp_error", "raise_dcp_error",
           "agree_on_files"]

#: ``manifest.json`` ``layout`` of a DCP checkpoint.
SHARDED_LAYOUT = "sharded"


def describe_dcp_error(exc: BaseException) -> str:
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


def raise_dcp_error(exc: BaseException, path: Path, doing: str = "load") -> None:
    """Raise DCP's ``CheckpointException`` as ours: the first rank's
    ``CorruptCheckpointError`` when a file failed its check, else a ``CheckpointError``."""
    failures = getattr(exc, "failures", None)
    for _, pair in sorted(failures.items()) if isinstance(failures, dict) else ():
        error = pair[0] if isinstance(pair, tuple) else pair
        if isinstance(error, CorruptCheckpointError):
            raise CorruptCheckpointError(error.path, error.problem) from exc
    raise CheckpointError(f"Could not {doing} {path}: {describe_dcp_error(exc)}") from exc


def agree_on_files(on: bool) -> Callable[[str | None], None]:
    """A collective for :class:`~accel_checkpoint.dcp_io.VerifiedReader`: every rank passes
    its problem (``"path\\0problem"``) or ``None``; the first one is raised on every rank."""
    from accel_checkpoint.rank_writers import gather

    def agree(problem: str | None) -> None:
        found = sorted(p for p in gather(problem, on) if p)
        if found:
            raise CorruptCheckpointError(*found[0].split("\0", 1))

    return agree


def owner_model(optimizer: torch.optim.Optimizer, models: dict[str, nn.Module],
                action: str = "save") -> nn.Module:
    """The model whose parameters ``optimizer`` updates (matched by identity); ``action``
    ("save" or "load") names what the refusal asks the caller to do with it."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in models.values():
        if any(id(p) in params for p in model.parameters()):
            return model
    raise CheckpointError(f"An optimizer's parameters belong to none of the models given: "
                          f"{action} the model it optimizes in the same call (its state is "
                          "keyed by the model's parameter names).")


def _models(objects: Mapping[str, Any]) -> dict[str, nn.Module]:
    return {n: o for n, o in objects.items() if isinstance(o, nn.Module)}


def _state_dicts(objects: Mapping[str, Any]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    models = _models(objects)
    state: dict[str, Any] = {}
    for name, obj in objects.items():
        if isinstance(obj, nn.Module):
            state[name] = get_model_state_dict(obj)
        elif isinstance(obj, torch.optim.Optimizer):
            state[name] = get_optimizer_state_dict(owner_model(obj, models), obj)
        else:
            state[name] = obj.state_dict()
    return state


def _apply(objects: Mapping[str, Any], state: dict[str, Any], non_strict: Any = ()) -> None:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    models = _models(objects)
    for name, obj in objects.items():
        if isinstance(obj, nn.Module):
            set_model_state_dict(obj, state[name],
                                 options=StateDictOptions(strict=name not in non_strict))
        elif isinstance(obj, torch.optim.Optimizer):
            set_optimizer_state_dict(owner_model(obj, models, "load"), obj, state[name])
        else:
            obj.load_state_dict(state[name])


class DCPWriter:
    """Writes and reads DCP shards, every rank its own (layout ``"sharded"``)."""

    layout = SHARDED_LAYOUT
    unpickles = UNPICKLES_RESTRICTED
    loads_non_strict = True
    """``load`` takes ``non_strict=`` (model entry names loaded as ``strict=False``)."""
    loads_in_place = True
    """``load`` writes only into the objects' tensors (and replaces torch optimizers' state):
    a copy kept before puts them back if the load fails (:mod:`accel_checkpoint.rollback`)."""

    def save(self, staging: Path, objects: Mapping[str, Any], rank: int,
             world_size: int) -> list[str]:
        """DCP-save ``objects`` into ``staging``; the files this rank owns."""
        import torch.distributed.checkpoint as dcp

        from accel_checkpoint.dcp_io import DCP_METADATA_NAME

        state = _state_dicts(objects)
        writer = dcp.FileSystemWriter(staging, single_file_per_rank=True, sync_files=True)
        with warnings.catch_warnings():  # DCP warns that no_dist means one process: it does
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            try:
                dcp.save(state, storage_writer=writer, no_dist=world_size == 1)
            except CheckpointException as exc:  # a BaseException: give it our type and a line
                raise CheckpointError(describe_dcp_error(exc)) from exc
        prefix = f"__{rank}_"
        files = sorted(p.name for p in staging.iterdir() if p.name.startswith(prefix))
        if rank == 0 and (staging / DCP_METADATA_NAME).is_file():
            files.append(DCP_METADATA_NAME)
        return files

    def load(self, path: Path, objects: Mapping[str, Any], rank: int, world_size: int, *,
             non_strict: Any = ()) -> None:
        """DCP-load ``objects`` from ``path``: DCP reads only bytes hash-checked as they are
        read (:class:`~accel_checkpoint.dcp_io.VerifiedReader`), and every rank's files
        pass before any rank fills a tensor. The models named in ``non_strict`` load as
        ``load_state_dict(strict=False)`` does: their keys the checkpoint lacks keep their
        values, and keys only the checkpoint has are ignored (a shape mismatch still
        fails). An object with ``state_dict_to_load(saved_keys, name)`` says what to read
        from the keys the checkpoint holds (a pipeline stage's optimizer: older layouts)."""
        import torch.distributed.checkpoint as dcp

        from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeLoadPlanner, VerifiedReader
        from accel_checkpoint.manifest import read_manifest
        from accel_checkpoint.rank_writers import dist_info

        files = read_manifest(path).files
        state = _state_dicts(objects)
        reader = VerifiedReader(path, files.get(DCP_METADATA_NAME), files=files,
                                agree=agree_on_files(dist_info()[2]))
        fitted = [n for n, o in objects.items() if hasattr(o, "state_dict_to_load")]
        if non_strict or fitted:  # DCP reads only the keys given: give those the file has
            saved = set(reader.read_metadata().state_dict_metadata)
            for name in fitted:  # an object that reads what it finds (older layouts)
                state[name] = objects[name].state_dict_to_load(saved, name)
            for name in non_strict:
                state[name] = {k: v for k, v in state[name].items() if f"{name}.{k}" in saved}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            try:
                dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(),
                         no_dist=world_size == 1)
            except CheckpointException as exc:  # a BaseException: give it our type and a line
                raise_dcp_error(exc, path)
        _apply(objects, state, non_strict)

    def full_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """The model's full state dict, gathered to CPU on rank 0 (``{}`` elsewhere); a
        collective for a sharded model."""
        return full_model_state_dict(model)

    def __repr__(self) -> str:
        return "DCPWriter()"


def full_model_state_dict(model: nn.Module) -> dict[str, Any]:
    """torch's full state dict of ``model`` (DTensors gathered; on rank 0 only, in CPU
    memory): Accelerate's FSDP full state dict with ``rank0_only``."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))

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
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from accel_checkpoint.coordination import new_staging_dir
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.fileio import read_json, write_json
from accel_checkpoint.manifest import (
    FileRecord,
    Manifest,
    check_bytes,
    hash_file,
    library_versions,
    map_file,
    verify_checkpoint,
)
from accel_checkpoint.saving import _commit, check_name

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


def _write_and_hash(staging: Path, state: dict[str, Any], data: Any, rank: int,
                    on: bool) -> dict[str, Any]:
    """DCP-save ``state`` into ``staging``; the records of the files this rank owns."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(staging, single_file_per_rank=True, sync_files=True)
    with warnings.catch_warnings():  # DCP warns that no_dist means one process: it does
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.save(state, storage_writer=writer, no_dist=not on)
    prefix = f"__{rank}_"
    files = {p.name: _record(p) for p in staging.iterdir() if p.name.startswith(prefix)}
    if rank == 0:
        if data is not None:
            files[_DATA_FILE] = write_json(staging / _DATA_FILE, data).to_json()
        for p in staging.iterdir():
            if p.is_file() and not p.name.startswith("__") and p.name not in files:
                files[p.name] = _record(p)  # .metadata
    return files


def save_sharded_state(directory: str | os.PathLike[str], objects: Mapping[str, Any], *,
                       data: Any = None, step: int | None = None,
                       metadata: dict[str, Any] | None = None) -> Path:
    """Save sharded ``objects`` (name -> model, optimizer or stateful) to ``directory``.

    A collective: call it on every rank. Each rank writes its own shards (DCP); rank 0
    writes ``data`` (JSON) and the manifest and renames the staging directory into place.
    Every rank returns the committed path, or raises if any rank failed (nothing is
    committed then, and the previous checkpoint at ``directory`` is untouched).
    """
    final = Path(directory)
    rank, world, on = _dist()
    kinds = sharded_objects(objects)
    staging = Path(_broadcast(str(new_staging_dir(final)) if rank == 0 else None, on))
    outcome: dict[str, Any]
    try:
        outcome = {"files": _write_and_hash(staging, _state_dicts(objects, kinds), data,
                                            rank, on)}
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        outcome = {"error": _describe(exc)}
    results = _gather(outcome, on)
    error = next((f"rank {r}: {o['error']}" for r, o in enumerate(results) if "error" in o),
                 None)
    if rank == 0 and error is None:
        try:
            files = {n: FileRecord.from_json(rec) for o in results for n, rec in o["files"].items()}
            stray = sorted(p.name for p in staging.iterdir() if p.name not in files)
            if stray:
                raise CheckpointError(f"unexpected files in {staging}: {stray}")
            manifest = Manifest(files=files, step=step, world_size=world,
                                ranks=list(range(world)), layout=SHARDED_LAYOUT,
                                created_unix=time.time(), libraries=library_versions(),
                                metadata={**(metadata or {}), OBJECTS_KEY: kinds})
            _commit(staging, final, manifest)
        except Exception as exc:
            error = f"rank 0: {type(exc).__name__}: {exc}"
    if rank == 0 and error is not None:
        shutil.rmtree(staging, ignore_errors=True)
    error = _broadcast(error, on)
    if error is not None:
        raise CheckpointError(f"Sharded save of {final} failed, nothing was committed: {error}")
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
    for name in sorted(manifest.files)[rank::world]:
        try:
            check_bytes(path / name, map_file(path / name), manifest.files[name])
        except FileNotFoundError:
            return f"{path / name}\0listed in the manifest but missing"
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


def load_sharded_state(directory: str | os.PathLike[str], objects: Mapping[str, Any], *,
                       strict: bool = True) -> LoadedShardedState:
    """Verify ``directory`` and load it into ``objects`` (sharded like, or unlike, the save).

    A collective: call it on every rank with objects built (and sharded) the same way.
    The whole checkpoint is hash-checked before anything is read; a damaged file raises
    ``CorruptCheckpointError`` naming it, on every rank. ``strict``: every object must be
    in the checkpoint (else it is skipped with a warning).
    """
    import torch.distributed.checkpoint as dcp

    from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeLoadPlanner, VerifiedReader

    path = Path(directory)
    rank, world, on = _dist()
    manifest = read_sharded_manifest(path, rank, world, on)
    saved = dict(manifest.metadata.get(OBJECTS_KEY, {}))
    kinds = sharded_objects(objects)
    missing = sorted(set(kinds) - set(saved))
    if missing and strict:
        raise CheckpointError(f"{path} has no object(s) {missing} (it has: "
                              f"{', '.join(sorted(saved)) or 'none'}).")
    if missing:
        warnings.warn(f"{path} has no object(s) {missing}; they keep their state.", stacklevel=2)
    chosen = {n: o for n, o in objects.items() if n in saved}
    kinds = {n: kinds[n] for n in chosen}
    state = _state_dicts(chosen, kinds)
    reader = VerifiedReader(path, manifest.files.get(DCP_METADATA_NAME))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        try:
            dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=not on)
        except CheckpointException as exc:  # a BaseException: give it our type and a line
            raise CheckpointError(f"Could not load {path}: {_describe(exc)}") from exc
    _apply(chosen, kinds, state)
    data = None
    if _DATA_FILE in manifest.files:
        data = read_json(path / _DATA_FILE, manifest.files[_DATA_FILE])
    return LoadedShardedState(path, manifest, data, manifest.step)

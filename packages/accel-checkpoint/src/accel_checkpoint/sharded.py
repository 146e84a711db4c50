"""Sharded checkpoints of sharded models (FSDP2 ``fully_shard``, DTensor) through DCP.

``save_sharded_state`` / ``load_sharded_state`` are the per-rank protocol of
:mod:`accel_checkpoint.per_rank` with DCP as the writer (:class:`~accel_checkpoint.
dcp_writer.DCPWriter`, layout ``"sharded"``): every rank writes only its own shards into
the staging directory, hashes them, rank 0 lists them all in ``manifest.json`` and
commits with one atomic rename; loading checks every file first (the ranks share the
hashing), then DCP reads its pickled ``.metadata`` through an allow-list unpickler. A
checkpoint loads into a model sharded over a different number of processes too.

Objects whose state is the same on every rank (``replicated=``: schedulers, dataloader
positions, counters) are written whole by rank 0 as safetensors + JSON and come back
whole: DCP would only fill the keys a freshly built object already has. With ``rng=True``
each rank writes its own RNG states. ``prepare_dir`` may add files to the staging
directory (a save pre-hook's ``save_pretrained``); they are listed and hash-checked too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel_checkpoint.dcp_writer import SHARDED_LAYOUT, DCPWriter
from accel_checkpoint.manifest import Manifest
from accel_checkpoint.per_rank import (
    OBJECTS_KEY,
    LoadedRankState,
    load_rank_state,
    read_rank_manifest,
    save_rank_state,
    sharded_objects,
)

__all__ = ["SHARDED_LAYOUT", "OBJECTS_KEY", "save_sharded_state", "load_sharded_state",
           "LoadedShardedState", "sharded_objects", "read_sharded_manifest"]

#: What :func:`load_sharded_state` returns (the per-rank protocol's result).
LoadedShardedState = LoadedRankState


def save_sharded_state(directory: str | os.PathLike[str], objects: Mapping[str, Any], *,
                       data: Any = None, step: int | None = None,
                       metadata: dict[str, Any] | None = None,
                       replicated: Mapping[str, Any] | None = None, rng: bool = False,
                       prepare_dir: Callable[[Path], Any] | None = None,
                       on_commit: Callable[[Path], Any] | None = None) -> Path:
    """Save ``objects`` (models, optimizers, ...) shard by shard into ``directory``.

    A collective: call it on every rank. Each rank writes its own shards (DCP); rank 0
    writes ``data`` (JSON), the ``replicated`` objects (written whole as safetensors +
    JSON) and the manifest, and renames the staging directory into place. ``rng``: each
    rank also writes its RNG states. ``prepare_dir(staging)`` runs on every rank before
    any state is written; its files are committed and listed in the manifest.
    ``on_commit(path)`` runs on rank 0 after the commit (rotation). Every rank returns the
    committed path, or raises if any rank failed (nothing is committed then, and the
    previous checkpoint at ``directory`` is untouched).
    """
    return save_rank_state(directory, DCPWriter(), objects, data=data, step=step,
                           metadata=metadata, replicated=replicated, rng=rng,
                           prepare_dir=prepare_dir, on_commit=on_commit)


def read_sharded_manifest(path: Path, rank: int = 0, world: int = 1,
                          on: bool = False) -> Manifest:
    """Verify a sharded checkpoint (every file; hashing shared by the ranks)."""
    return read_rank_manifest(path, SHARDED_LAYOUT, rank, world, on)


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
    return load_rank_state(directory, DCPWriter(), objects, strict=strict,
                           replicated=replicated, rng=rng)

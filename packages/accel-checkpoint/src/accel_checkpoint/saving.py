"""The commit protocol of one save: snapshot, write into a staging directory, commit.

1. snapshot: ``state_dict()`` of every object (rank 0 only: they are replicated), the
   plain data, and this rank's RNG states; cloned to CPU when the write happens later.
2. write: each part into ``<name>.tmp-<id>/`` as safetensors (tensors) + JSON (the rest),
   every file fsynced and hashed as it is written.
3. commit (rank 0, after every rank's files are in): ``manifest.json`` listing every file,
   fsync the directory, rename it into place atomically, fsync the parent.

A crash at any point before the rename leaves only the staging directory, which loading
refuses and ``accel checkpoint list`` shows as partial; earlier checkpoints are untouched.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accel_state import env
from accel_state.random import capture_rng_state

from accel_checkpoint.constants import MANIFEST_NAME, OLD_INFIX
from accel_checkpoint.coordination import Peers, SaveRound
from accel_checkpoint.durability import BackgroundFlusher, fsync_dir, fsync_file
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.fileio import write_json, write_safetensors
from accel_checkpoint.hashing import FileRecord, record_new_files
from accel_checkpoint.leftovers import claim, held, release
from accel_checkpoint.manifest import Manifest, library_versions
from accel_checkpoint.targets import check_save_target
from accel_checkpoint.tree import flatten_state

__all__ = ["Part", "snapshot", "stage", "write_parts", "run_save", "abort_save", "DATA_NAME",
           "rng_name", "check_name", "release_snapshot_buffers"]

DATA_NAME = "_data"
_RNG_PREFIX = "random_states_"
_VALID_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}")


def rng_name(rank: int) -> str:
    return f"{_RNG_PREFIX}{rank}"


def check_name(name: str) -> str:
    """Object names become file names: refuse what could escape or clash."""
    if (not isinstance(name, str) or not _VALID_NAME.fullmatch(name)
            or name.startswith(_RNG_PREFIX) or name == MANIFEST_NAME.split(".")[0]):
        raise CheckpointError(
            f"Invalid checkpoint object name {name!r}: use letters, digits, '_', '.', '-' "
            f"(starting with a letter or digit), not 'manifest' nor '{_RNG_PREFIX}*'.")
    return name


@dataclass
class Part:
    """One saved object: its JSON skeleton and its tensors."""

    name: str
    kind: str  # "state", "data" or "rng"
    skeleton: Any
    tensors: dict[str, Any]
    flat: bool
    rank: int | None = None
    deferred: dict[str, Any] = field(default_factory=dict)
    """Tensors still to be copied into ``tensors`` by :func:`stage` (async saves)."""
    ready: Any = None
    """CUDA event recorded at the snapshot: :func:`stage` copies after it."""


# Async saves copy the state into these CPU buffers, kept from one save to the next: a
# copy into memory already faulted in runs ~4x faster than into a fresh allocation.
# Safe to reuse because every save first waits for the previous async save to finish.
_BUFFERS: dict[tuple[str, str], torch.Tensor] = {}
_BUFFERS_LOCK = threading.Lock()


def _buffer_for(name: str, key: str, tensor: torch.Tensor) -> torch.Tensor:
    buffer = _BUFFERS.get((name, key))
    if (buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype
            or buffer.device.type != "cpu"):
        buffer = torch.empty(tensor.shape, dtype=tensor.dtype,
                             pin_memory=tensor.device.type == "cuda")
        _BUFFERS[(name, key)] = buffer
    return buffer


def _copy_to_buffers(name: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    with _BUFFERS_LOCK:
        for key, tensor in tensors.items():
            out[key] = _buffer_for(name, key, tensor).copy_(tensor, non_blocking=True)
        if any(t.device.type == "cuda" for t in tensors.values()):
            torch.cuda.synchronize()
    return out


def release_snapshot_buffers() -> None:
    """Free the CPU buffers kept for async saves (they hold a copy of the state)."""
    with _BUFFERS_LOCK:
        _BUFFERS.clear()


def _storage_key(tensor: Any) -> int:
    return tensor.untyped_storage().data_ptr() if isinstance(tensor, torch.Tensor) else 0


def _part(name: str, kind: str, state: Any, copy: bool, rank: int | None = None,
          stable: frozenset[int] = frozenset()) -> Part:
    skeleton, tensors = flatten_state(state)
    deferred: dict[str, Any] = {}
    if copy:
        deferred = {k: t for k, t in tensors.items() if _storage_key(t) in stable}
        now = {k: t for k, t in tensors.items() if k not in deferred}
        tensors = {**_copy_to_buffers(name, now), **dict.fromkeys(deferred)}
    ready = None
    if any(t.device.type == "cuda" for t in deferred.values()):
        ready = torch.cuda.Event()
        ready.record()  # what the current stream has queued so far: the state to save
    flat = bool(tensors) and len(tensors) == len(skeleton) and isinstance(skeleton, dict) and all(
        isinstance(v, dict) and v.get("__tensor__") == k for k, v in skeleton.items())
    return Part(name, kind, skeleton, tensors, flat, rank, deferred, ready)


def snapshot(objects: dict[str, Any], data: Any, rng: bool, peers: Peers,
             copy: bool = False, stable: Any = ()) -> list[Part]:
    """What this rank writes. ``copy``: clone tensors to CPU (the write happens later).

    ``stable`` (with ``copy``): tensors the caller promises not to change until
    :func:`stage` has run (an optimizer's parameters and state, until its next step);
    tensors sharing their storage are copied by ``stage`` on the writing thread instead
    of now, so the caller is blocked only for the rest.
    """
    keys = frozenset(_storage_key(t) for t in stable) - {0}
    parts: list[Part] = []
    if peers.is_writer:
        for name, obj in objects.items():
            state = obj.state_dict() if hasattr(obj, "state_dict") else obj
            parts.append(_part(check_name(name), "state", state, copy, stable=keys))
        if data is not None:
            parts.append(_part(DATA_NAME, "data", data, copy))
    if rng:
        parts.append(_part(rng_name(peers.rank), "rng", capture_rng_state(), False, peers.rank))
    return parts


def stage(parts: list[Part]) -> None:
    """Copy the deferred (``stable``) tensors of ``parts`` into CPU buffers.

    CUDA tensors are copied on a side stream after the event recorded at the snapshot,
    so the caller's kernels queued since (which only read these tensors) run meanwhile.
    """
    cuda = [p for p in parts if p.ready is not None]
    stream = torch.cuda.Stream() if cuda else None
    with _BUFFERS_LOCK, (torch.cuda.stream(stream) if stream is not None else nullcontext()):
        for part in parts:
            if part.ready is not None:
                stream.wait_event(part.ready)
            for key, tensor in part.deferred.items():
                part.tensors[key] = _buffer_for(part.name, key, tensor).copy_(
                    tensor, non_blocking=True)
            part.deferred, part.ready = {}, None
        if stream is not None:
            stream.synchronize()


def _test_delay() -> None:
    delay = env.CHECKPOINT_TEST_DELAY.get()
    if delay:
        time.sleep(float(delay))


def write_parts(staging: Path, parts: list[Part]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write every part; return ``(files, objects)`` records for the manifest (JSON-ready).

    Written one after another (on several threads it measured slower: the chunk hashing
    already keeps the cores busy), but each part's fsync runs on a second thread while the
    next part is written, so a disk flushes one part while the next fills the page cache.
    Every fsync has finished when this returns (before the manifest is written)."""
    files: dict[str, Any] = {}
    objects: dict[str, Any] = {}
    with BackgroundFlusher() as flusher:  # an fsync that failed fails the save
        results = [_write_part(staging, part, flusher) for part in parts]
    for part, (part_files, entry) in zip(parts, results, strict=True):
        files.update(part_files)
        objects[part.name] = entry
    return files, objects


def _write_part(staging: Path, part: Part, flusher: BackgroundFlusher
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write one part's safetensors and/or JSON file (the safetensors file's fsync goes to
    ``flusher``); ``(files, manifest entry)``."""
    files: dict[str, Any] = {}
    entry: dict[str, Any] = {"kind": part.kind, "tensors": None, "json": None}
    if part.rank is not None:
        entry["rank"] = part.rank
    if part.tensors:
        name = f"{part.name}.safetensors"
        record = write_safetensors(staging / name, part.tensors, {"format": "pt"}, fsync=False)
        flusher.submit(fsync_file, staging / name)
        files[name] = record.to_json()
        entry["tensors"] = name
        _test_delay()
    if not part.flat:
        name = f"{part.name}.json"
        record = write_json(staging / name, part.skeleton)
        files[name] = record.to_json()
        entry["json"] = name
    return files, entry


def _commit(staging: Path, final: Path, manifest: Manifest) -> None:
    write_json(staging / MANIFEST_NAME, manifest.to_json())
    fsync_dir(staging)
    _test_delay()
    parked = None
    check_save_target(final)  # again: the target may have changed while we wrote
    if final.exists():  # overwrite an accel checkpoint: park the old copy, swap, delete it
        parked = final.parent / f"{final.name}{OLD_INFIX}{uuid.uuid4().hex[:12]}"
        os.replace(final, parked)
        claim(parked)
    os.replace(staging, final)
    release(staging)
    fsync_dir(final.parent)
    if parked is not None:
        shutil.rmtree(parked, ignore_errors=True)
        release(parked)


def abort_save(round_: SaveRound, staging: Path | None, error: BaseException) -> None:
    """A save failed on this rank: tell the others, and rank 0 removes the staging dir."""
    if not round_.peers.is_writer:
        if staging is not None:
            round_.publish({}, {}, error=error)
        return
    round_.finish(error=error)
    if staging is not None and staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
    if staging is not None:
        release(staging)


def run_save(round_: SaveRound, staging: Path | None, parts: list[Part], step: int | None,
             metadata: dict[str, Any] | None) -> Path | None:
    """Write this rank's parts into ``staging`` (from ``round_.begin()``) and commit.

    Parts with deferred tensors must have been through :func:`stage` (the async save's
    thread does it first). Rank 0 also lists the files nobody recorded (what
    ``prepare_dir`` wrote) and commits; every rank returns once the commit is done
    (``None`` on a rank that must not write).
    """
    peers, final = round_.peers, round_.final
    if staging is None:
        return None
    try:
        with held(staging) if not peers.is_writer else nullcontext():  # the writer's anyway
            files, objects = write_parts(staging, parts)
        if not peers.is_writer:
            round_.publish(files, objects)
        else:
            ranks = [peers.rank] if any(p.kind == "rng" for p in parts) else []
            for other_files, other_objects in round_.collect():
                files.update(other_files)
                objects.update(other_objects)
                ranks += [e["rank"] for e in other_objects.values() if "rank" in e]
            records = {n: FileRecord.from_json(r) for n, r in files.items()}
            records.update(record_new_files(staging, set(records)))
            manifest = Manifest(
                files=records, objects=objects, step=step, world_size=peers.world_size,
                ranks=sorted(ranks), created_unix=time.time(), libraries=library_versions(),
                metadata=metadata or {})
            _commit(staging, final, manifest)
    except BaseException as exc:
        abort_save(round_, staging, exc)
        raise
    if peers.is_writer:
        round_.finish()
    else:
        round_.wait_done()
    return final

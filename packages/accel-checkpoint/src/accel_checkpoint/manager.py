"""Public API: save/load named stateful objects, plain data and RNG states; rotation.

``save_checkpoint`` / ``load_checkpoint`` work on one directory; ``CheckpointManager`` adds
naming (``<prefix>_<n>``), "latest" and ``total_limit`` rotation under a root directory.
Neither needs an ``Accelerator``: any object with ``state_dict``/``load_state_dict`` can be
saved from a plain PyTorch loop or another framework.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_state.random import restore_rng_state

from accel_checkpoint.coordination import Peers
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.fileio import read_json, read_safetensors
from accel_checkpoint.manifest import (
    Manifest,
    latest_checkpoint,
    list_checkpoints,
    verify_checkpoint,
)
from accel_checkpoint.saving import DATA_NAME, rng_name, run_save, snapshot
from accel_checkpoint.tree import unflatten_state

__all__ = ["CheckpointManager", "LoadedCheckpoint", "PendingSave", "save_checkpoint",
           "load_checkpoint", "read_object", "rotate_checkpoints", "wait_for_pending_saves"]

_PENDING: list[PendingSave] = []
_PENDING_LOCK = threading.Lock()


class PendingSave:
    """An asynchronous save in flight: :meth:`wait` returns the path once committed."""

    def __init__(self, target: Any) -> None:
        self._result: Path | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(target,),
                                        name="accel-checkpoint-async-save")
        # Not a daemon: a normal interpreter exit waits for the commit to finish.
        with _PENDING_LOCK:
            _PENDING.append(self)
        self._thread.start()

    def _run(self, target: Any) -> None:
        try:
            self._result = target()
        except BaseException as exc:  # re-raised in wait()
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> Path | None:
        """Block until the save is committed; re-raise its error if it failed."""
        self._thread.join()
        with _PENDING_LOCK:
            if self in _PENDING:
                _PENDING.remove(self)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result


def wait_for_pending_saves() -> None:
    """Wait for every asynchronous save of this process (call before exiting or loading)."""
    while True:
        with _PENDING_LOCK:
            pending = list(_PENDING)
        if not pending:
            return
        for save in pending:
            save.wait()


def save_checkpoint(path: str | os.PathLike[str], objects: Mapping[str, Any] | None = None, *,
                    data: Any = None, step: int | None = None, rng: bool = True,
                    metadata: dict[str, Any] | None = None, async_save: bool = False,
                    on_commit: Any = None) -> Path | PendingSave | None:
    """Save ``objects`` (name -> object with ``state_dict``), ``data`` and RNG states to ``path``.

    Call it on every process: rank 0 writes the objects, data and manifest, each rank its
    RNG states. ``async_save`` copies the state to CPU memory now and writes it on a
    background thread (returns a :class:`PendingSave`); the next save or load waits for
    it. ``on_commit(path)`` runs on rank 0 after the commit (rotation hooks in here).
    Returns the checkpoint path (``None`` on a rank that arrived after a solo commit).
    """
    wait_for_pending_saves()
    final = Path(path)
    peers = Peers.current()
    parts = snapshot(dict(objects or {}), data, rng, peers, copy=async_save)

    def write() -> Path | None:
        result = run_save(final, parts, peers, step, metadata)
        if on_commit is not None and peers.is_writer and result is not None:
            on_commit(result)
        return result

    return PendingSave(write) if async_save else write()


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` found: the path, its manifest, the plain data, the step."""

    path: Path
    manifest: Manifest
    data: Any
    step: int | None


def read_object(path: str | os.PathLike[str], name: str, manifest: Manifest | None = None) -> Any:
    """The saved state of object ``name``, every file checked against the manifest."""
    path = Path(path)
    manifest = manifest if manifest is not None else verify_checkpoint(path, deep=False)
    entry = manifest.objects.get(name)
    if entry is None:
        names = ", ".join(sorted(n for n in manifest.objects if n != DATA_NAME)) or "none"
        raise CheckpointError(f"{path} has no object named {name!r} (it has: {names}).")
    tensors: dict[str, Any] = {}
    if entry.get("tensors"):
        tensors, _ = read_safetensors(path / entry["tensors"], manifest.files[entry["tensors"]])
    if not entry.get("json"):
        return tensors
    return unflatten_state(read_json(path / entry["json"], manifest.files[entry["json"]]), tensors)


def load_checkpoint(path: str | os.PathLike[str], objects: Mapping[str, Any] | None = None, *,
                    rng: bool = True, strict: bool = True) -> LoadedCheckpoint:
    """Verify ``path`` and restore ``objects`` (name -> object with ``load_state_dict``).

    The manifest and file sizes are checked before anything is loaded, and each file's
    sha256 as it is read: a partial or corrupt checkpoint raises
    ``CorruptCheckpointError`` naming the file. ``strict``: an object missing from the
    checkpoint is an error (else a warning). ``rng`` restores this rank's RNG states.
    """
    wait_for_pending_saves()
    path = Path(path)
    manifest = verify_checkpoint(path, deep=False)
    states = {}
    for name in objects or {}:
        if name not in manifest.objects:
            if strict:
                read_object(path, name, manifest)  # raises, listing what is there
            warnings.warn(f"{path} has no object {name!r}; it keeps its current state.",
                          stacklevel=2)
            continue
        states[name] = read_object(path, name, manifest)
    data = read_object(path, DATA_NAME, manifest) if DATA_NAME in manifest.objects else None
    rng_state = None
    if rng:
        rank = Peers.current().rank
        if rng_name(rank) in manifest.objects:
            rng_state = read_object(path, rng_name(rank), manifest)
        else:
            warnings.warn(f"{path} holds no RNG state for rank {rank} (saved by "
                          f"{manifest.world_size} process(es), ranks {manifest.ranks}); this "
                          "rank's random draws will differ from the original run.", stacklevel=2)
    # Everything was read and verified: only now change the caller's objects.
    for name, state in states.items():
        objects[name].load_state_dict(state)
    if rng_state is not None:
        restore_rng_state(rng_state)
    return LoadedCheckpoint(path, manifest, data, manifest.step)


def rotate_checkpoints(root: str | os.PathLike[str], keep: int, pattern: str | None = None,
                       protect: Path | None = None) -> list[Path]:
    """Delete the oldest verified checkpoints under ``root`` beyond the newest ``keep``.

    Only complete checkpoints (manifest and sizes check out) matching ``pattern`` are
    counted or deleted; partial and corrupt directories are left for a human to inspect.
    """
    ok = [info.path for info in list_checkpoints(root, pattern=pattern) if info.ok]
    doomed = [p for p in ok[:max(len(ok) - keep, 0)] if protect is None or p != protect]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


class CheckpointManager:
    """Numbered checkpoints ``<root>/<prefix>_<n>`` with "latest" and rotation.

    Args:
        root: directory holding the checkpoints.
        total_limit: keep at most this many complete checkpoints (oldest deleted after
            each successful save; ``None`` keeps all).
        prefix: checkpoint directory names are ``<prefix>_<step or counter>``.
    """

    def __init__(self, root: str | os.PathLike[str], *, total_limit: int | None = None,
                 prefix: str = "checkpoint") -> None:
        if total_limit is not None and total_limit < 1:
            raise CheckpointError(f"total_limit={total_limit!r} would delete every checkpoint: "
                                  "use a positive number, or None to keep all.")
        self.root = Path(root)
        self.total_limit = total_limit
        self.prefix = prefix
        self._pattern = re.escape(prefix) + r"_\d+"

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        return [i.path for i in list_checkpoints(self.root, pattern=self._pattern) if i.ok]

    def latest(self) -> Path | None:
        """The newest complete checkpoint (``None`` when there is none)."""
        return latest_checkpoint(self.root, pattern=self._pattern)

    def next_index(self) -> int:
        numbers = [int(p.name.rsplit("_", 1)[1]) for p in self.checkpoints()]
        return max(numbers, default=-1) + 1

    def save(self, objects: Mapping[str, Any] | None = None, *, step: int | None = None,
             **kwargs: Any) -> Path | PendingSave | None:
        """Save to ``<prefix>_<step>`` (or the next free number); see :func:`save_checkpoint`."""
        index = step if step is not None else self.next_index()
        target = self.root / f"{self.prefix}_{index}"
        on_commit = None
        if self.total_limit is not None:
            def on_commit(path: Path) -> None:
                rotate_checkpoints(self.root, self.total_limit, self._pattern, protect=path)
        return save_checkpoint(target, objects, step=step, on_commit=on_commit, **kwargs)

    def load(self, objects: Mapping[str, Any] | None = None, *,
             path: str | os.PathLike[str] | None = None, **kwargs: Any) -> LoadedCheckpoint:
        """Load ``path`` (default: the latest complete checkpoint); see :func:`load_checkpoint`."""
        wait_for_pending_saves()
        target = Path(path) if path is not None else self.latest()
        if target is None:
            raise CheckpointError(f"No complete checkpoint under {self.root} to load.")
        return load_checkpoint(target, objects, **kwargs)

    def wait(self) -> None:
        """Wait for this process's asynchronous saves."""
        wait_for_pending_saves()

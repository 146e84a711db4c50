"""Public API: save/load named stateful objects, plain data and RNG states; rotation.

``save_checkpoint`` / ``load_checkpoint`` work on one directory; ``CheckpointManager`` adds
naming (``<prefix>_<n>``), "latest" and ``total_limit`` rotation under a root directory.
Neither needs an ``Accelerator``: any object with ``state_dict``/``load_state_dict`` can be
saved from a plain PyTorch loop or another framework.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_checkpoint.applying import apply_states, copies_into_place
from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.containment import inside
from accel_checkpoint.coordination import Peers, SaveRound
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.fileio import read_json, read_safetensors
from accel_checkpoint.hashing import FileRecord, Verification, current_digest, digest_algorithm
from accel_checkpoint.leftovers import clean_leftovers, trash
from accel_checkpoint.manifest import (
    Manifest,
    latest_checkpoint,
    list_checkpoints,
    verify_checkpoint,
)
from accel_checkpoint.saving import DATA_NAME, abort_save, rng_name, run_save, snapshot, stage
from accel_checkpoint.targets import check_save_target, foreign_entries
from accel_checkpoint.tree import unflatten_state

__all__ = ["CheckpointManager", "LoadedCheckpoint", "PendingSave", "save_checkpoint",
           "load_checkpoint", "read_object", "rotate_checkpoints", "wait_for_pending_saves",
           "wait_for_staging", "files_to_verify", "VERIFY_MODES"]

_PENDING: list[PendingSave] = []
_PENDING_LOCK = threading.Lock()


class PendingSave:
    """An asynchronous save in flight: :meth:`wait` returns the path once committed.

    :meth:`wait_staged` returns once the ``stable`` tensors given to the save have been
    copied (the caller may change them again from then on).
    """

    def __init__(self, target: Any, stage: Any = None) -> None:
        self._result: Path | None = None
        self._error: BaseException | None = None
        self._staged = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(target, stage),
                                        name="accel-checkpoint-async-save")
        # Not a daemon: a normal interpreter exit waits for the commit to finish.
        with _PENDING_LOCK:
            _PENDING.append(self)
        self._thread.start()

    def _run(self, target: Any, stage: Any) -> None:
        try:
            if stage is not None:
                stage()
        except BaseException as exc:  # re-raised in wait()
            self._error = exc
        finally:
            self._staged.set()
        if self._error is None:
            try:
                self._result = target()
            except BaseException as exc:  # re-raised in wait()
                self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait_staged(self) -> None:
        """Block until the deferred tensors are copied (errors surface in :meth:`wait`)."""
        self._staged.wait()

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


def wait_for_staging() -> None:
    """Wait until every asynchronous save of this process has copied its ``stable``
    tensors: call it before changing them (before the optimizer's next step)."""
    with _PENDING_LOCK:
        pending = list(_PENDING)
    for save in pending:
        save.wait_staged()


def save_checkpoint(path: str | os.PathLike[str], objects: Mapping[str, Any] | None = None, *,
                    data: Any = None, step: int | None = None, rng: bool = True,
                    metadata: dict[str, Any] | None = None, async_save: bool = False,
                    on_commit: Any = None, prepare_dir: Any = None,
                    stable: Any = (), save_on_each_node: bool = False
                    ) -> Path | PendingSave | None:
    """Save ``objects`` (name -> object with ``state_dict``), ``data`` and RNG states to ``path``.

    Call it on every process: rank 0 writes the objects, data and manifest, each rank its
    RNG states. ``prepare_dir(staging)`` runs on every rank before the state is taken: it
    may write files into the staging directory (the manifest lists and hashes them) and
    may still change ``objects`` (a dict). ``async_save`` copies the state to CPU memory
    now and writes it on a background thread (returns a :class:`PendingSave`); the next
    save or load waits for it. With ``async_save``, tensors sharing storage with a tensor
    of ``stable`` are copied on that thread instead: the caller must not change them until
    :func:`wait_for_staging` returns (the Accelerator calls it before the next optimizer
    step). ``on_commit(path)`` runs on rank 0 after the commit (rotation hooks in here).
    ``save_on_each_node``: for machines without a shared file system, each machine's local
    rank 0 writes a complete checkpoint at ``path`` on its own disk (with the RNG states of
    its machine's ranks) and runs ``on_commit`` there.
    Returns the checkpoint path (``None`` on a rank that arrived after a solo commit).
    """
    wait_for_pending_saves()
    final = Path(path)
    check_save_target(final)  # on every rank: all refuse alike, before anything is written
    peers = Peers.current(save_on_each_node)
    round_ = SaveRound(final, peers)
    staging = None
    try:
        staging = round_.begin()
        if staging is None:
            return None
        peers = round_.peers  # a rank released to save its path alone is that save's writer
        if prepare_dir is not None:
            prepare_dir(staging)
        parts = snapshot(dict(objects or {}), data, rng, peers, copy=async_save,
                         stable=stable if async_save else ())
    except BaseException as exc:
        abort_save(round_, staging, exc)
        raise

    digest = current_digest()  # the write may run on another thread: carry the choice

    def write() -> Path | None:
        with digest_algorithm(digest):
            result = run_save(round_, staging, parts, step, metadata)
        if peers.is_writer and result is not None:
            clean_leftovers(final.parent)  # what interrupted saves and rotations left
            if on_commit is not None:  # then rotation counts what was put back too
                on_commit(result)
        return result

    return PendingSave(write, stage=lambda: stage(parts)) if async_save else write()


VERIFY_MODES = ("full", "background")


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` found: the path, its manifest, the plain data, the step,
    and the :class:`Verification` of its files' bytes (already passed with ``verify="full"``;
    still running with ``verify="background"``: call ``verification.wait()``)."""

    path: Path
    manifest: Manifest
    data: Any
    step: int | None
    verification: Verification | None = None


def read_object(path: str | os.PathLike[str], name: str, manifest: Manifest | None = None,
                hashed: bool = True, verified: Verification | None = None,
                copy: bool = True) -> Any:
    """The saved state of object ``name``, every file checked against the manifest
    (``hashed=False``: sizes only, for a caller that verifies the bytes apart;
    ``verified``: a passed :class:`Verification` of the files, whose mappings are read).
    Its tensors are copies unless ``copy=False`` (views of the file's mapping, for a
    caller that copies them into place at once: a model's ``load_state_dict``)."""
    path = Path(path)
    manifest = manifest if manifest is not None else verify_checkpoint(path, deep=False)
    entry = manifest.objects.get(name)
    if entry is None:
        names = ", ".join(sorted(n for n in manifest.objects if n != DATA_NAME)) or "none"
        raise CheckpointError(f"{path} has no object named {name!r} (it has: {names}).")
    tensors: dict[str, Any] = {}
    index = path / MANIFEST_NAME
    if entry.get("tensors"):
        tensors, _ = read_safetensors(inside(path, entry["tensors"], index),
                                      manifest.files[entry["tensors"]], hashed,
                                      _take(verified, entry["tensors"]), copy=copy)
    if not entry.get("json"):
        return tensors
    skeleton = read_json(inside(path, entry["json"], index), manifest.files[entry["json"]],
                         hashed, _take(verified, entry["json"]))
    return unflatten_state(skeleton, tensors)


def _take(verified: Verification | None, name: str) -> Any:
    return verified.take(name) if verified is not None else None


def files_to_verify(manifest: Manifest, rank: int) -> dict[str, FileRecord]:
    """Every file of the checkpoint except the other ranks' RNG states (each rank checks
    its own): the objects, the plain data, and whatever a save hook wrote."""
    others = {f for entry in manifest.objects.values()
              if entry.get("kind") == "rng" and entry.get("rank", rank) != rank
              for f in (entry.get("tensors"), entry.get("json")) if f}
    return {name: rec for name, rec in manifest.files.items() if name not in others}


def kept_files(manifest: Manifest) -> set[str]:
    """The tensor files of nested states (an optimizer's, the plain data): their reader
    keeps the tensors, so they are read into memory rather than mapped. A flat state (a
    model's) is copied into the model by ``load_state_dict`` and may stay mapped."""
    return {entry["tensors"] for entry in manifest.objects.values()
            if entry.get("tensors") and (entry.get("json") or entry.get("kind") == "data")}


def _check_layout(path: Path, manifest: Manifest) -> None:
    if manifest.layout != "replicated":
        raise CheckpointError(
            f"{path} is a {manifest.layout} checkpoint (every one of its "
            f"{manifest.world_size} process(es) wrote its own files, e.g. the shards of a "
            "sharded model): load it through its layout — accel_checkpoint.load_sharded_state "
            f"for 'sharded', accel_checkpoint.layouts.resolve_layout({manifest.layout!r}).load "
            "for any, or Accelerator.load_state with the models prepared the same way — or "
            "turn a sharded one into plain weights with `accel merge-weights`.")


def load_checkpoint(path: str | os.PathLike[str], objects: Mapping[str, Any] | None = None, *,
                    rng: bool = True, strict: bool = True, verify: str = "full",
                    prepare: Any = None, manifest: Manifest | None = None) -> LoadedCheckpoint:
    """Verify ``path`` and restore ``objects`` (name -> object with ``load_state_dict``).

    ``verify="full"`` (default): the manifest, the sizes and every byte (each chunk's
    xxh3-128, or sha256 in older records) are checked in parallel before anything is
    loaded; a partial or corrupt checkpoint raises ``CorruptCheckpointError`` naming the
    file and no object is changed. States that cannot fit their objects (a shape or key
    mismatch, other parameter groups) are refused before any object is changed
    (:func:`accel_checkpoint.applying.apply_states`), and a load that fails part-way (an
    object's own ``load_state_dict`` raising) puts back what it had changed
    (:mod:`accel_checkpoint.rollback`).
    ``verify="background"``: manifest, sizes and file formats are checked, the state is
    loaded, and the byte check runs on background threads: the caller must call
    ``result.verification.wait()`` before trusting the state (the Accelerator does before
    the next optimizer step, save or end of training) — a fast start for big checkpoints.
    ``prepare(path)`` runs after the up-front checks and before objects are read (load
    pre-hooks: it may change ``objects``, a dict). ``strict``: an object missing from the
    checkpoint is an error (else a warning). ``rng`` restores this rank's RNG states.
    ``manifest``: the checkpoint's manifest when the caller has already read it.
    """
    if verify not in VERIFY_MODES:
        raise CheckpointError(f"verify={verify!r} is not a verification mode: use one of "
                              f"{', '.join(VERIFY_MODES)}.")
    wait_for_pending_saves()
    path = Path(path)
    manifest = verify_checkpoint(path, deep=False, manifest=manifest)
    _check_layout(path, manifest)
    rank = Peers.current().rank
    verified = None
    if verify == "full":  # the objects are then read from the mappings that were checked
        verification = verified = Verification(path, files_to_verify(manifest, rank),
                                               keep=True, read=kept_files(manifest))
        verification.wait()
    if prepare is not None:
        prepare(path)
    states = {}
    for name in objects or {}:
        if name not in manifest.objects:
            if strict:
                read_object(path, name, manifest)  # raises, listing what is there
            warnings.warn(f"{path} has no object {name!r}; it keeps its current state.",
                          stacklevel=2)
            continue
        # a model copies the tensors into its own; anything else (an optimizer) keeps them,
        # and a view would keep the file mapped after rotation deletes it
        states[name] = read_object(path, name, manifest, hashed=False, verified=verified,
                                   copy=not copies_into_place(objects[name]))
    data = (read_object(path, DATA_NAME, manifest, hashed=False, verified=verified)
            if DATA_NAME in manifest.objects else None)
    rng_state = None
    if rng:
        if rng_name(rank) in manifest.objects:
            rng_state = read_object(path, rng_name(rank), manifest, hashed=False,
                                    verified=verified)
        else:
            warnings.warn(f"{path} holds no RNG state for rank {rank} (saved by "
                          f"{manifest.world_size} process(es), ranks {manifest.ranks}); this "
                          "rank's random draws will differ from the original run.", stacklevel=2)
    if verified is not None:
        verified.release()  # files checked but not read (a prepare_dir's, say)
    # Everything was read (and, in full mode, verified): only now change the caller's objects,
    # after checking they fit (a refused load changes nothing, a failed one neither).
    apply_states(path, [(name, objects[name], state) for name, state in states.items()],
                 rng_state)
    if verify == "background":
        verification = Verification(path, files_to_verify(manifest, rank))
    return LoadedCheckpoint(path, manifest, data, manifest.step, verification)


def rotate_checkpoints(root: str | os.PathLike[str], keep: int, pattern: str | None = None,
                       protect: Path | None = None) -> list[Path]:
    """Delete the oldest verified checkpoints under ``root`` beyond the newest ``keep``.

    Only complete checkpoints (manifest and sizes check out) matching ``pattern`` are
    counted or deleted; partial and corrupt directories, folders without a manifest
    (Accelerate's included) and checkpoints holding files their manifest does not list
    (a warning says so) are left for a human to inspect.
    """
    ok = [info.path for info in list_checkpoints(root, pattern=pattern) if info.ok]
    doomed = [p for p in ok[:max(len(ok) - keep, 0)] if protect is None or p != protect]
    deleted = []
    for path in doomed:
        foreign = foreign_entries(path)
        if foreign:
            warnings.warn(f"total_limit: not deleting {path}, which also holds what its "
                          f"manifest does not list ({', '.join(foreign[:5])}); move those out "
                          "and delete it yourself.", stacklevel=2)
            continue
        trash(path)
        deleted.append(path)
    return deleted


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

"""Checkpoints in which every rank writes its own files, through a ``RankCheckpointWriter``.

The protocol (the writer — DCP, an engine's checkpoint — only writes and reads files):

1. every rank enters (rank 0 waits ``ACCEL_CHECKPOINT_PEER_TIMEOUT`` for the others and
   refuses if they never come: such a checkpoint needs every rank);
2. rank 0 makes the staging directory ``<name>.tmp-<id>/``; ``prepare_dir(staging)`` runs
   on every rank (save hooks; their files are listed and hashed too);
3. every rank: ``writer.save(staging, objects, rank, world)`` writes its files, which this
   rank then fsyncs and hashes; rank 0 writes ``data`` and the ``replicated`` objects
   (whose state is the same on every rank: schedulers, dataloader positions, ...) whole as
   safetensors + JSON; with ``rng`` each rank writes its RNG states;
4. rank 0 gathers every rank's records and commits — ``manifest.json`` (``layout`` =
   ``writer.layout``, the per-rank objects and their kinds under
   ``metadata["sharded_objects"]``), fsync, one atomic rename — only if no rank failed;
   otherwise the staging directory is removed and every rank raises, naming the rank;
5. committed, rank 0 cleans the parent folder of interrupted saves' and rotations'
   leftovers (:mod:`~accel_checkpoint.leftovers`; every rank holds the staging folder while
   it writes there), then runs ``on_commit`` (rotation); the others wait for the outcome.

Loading first does the same cleaning once every rank has entered it, then checks the
manifest and layout, refuses a writer that unpickles arbitrary objects unless trusted (see
:func:`pickle_problem`), hashes every file (the ranks share the work; a bad file is named
on every rank), runs ``prepare(path)`` (load hooks), reads the replicated objects and RNG
states, and only then calls ``writer.load`` — with ``read=``
(:func:`~accel_checkpoint.hashing.verified_reader`: a file's bytes, read once and
hash-checked) when the writer says ``reads_verified``, so that what it parses is what was
checked.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_state.protocols import RankCheckpointWriter

from accel_checkpoint.applying import apply_states, refuse_misfits
from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.coordination import Peers, SaveRound
from accel_checkpoint.durability import fsync_dir, fsync_file
from accel_checkpoint.errors import CheckpointError, CheckpointWriteError, CorruptCheckpointError
from accel_checkpoint.fileio import read_json, write_json
from accel_checkpoint.hashing import (
    FileRecord,
    Verification,
    hash_file,
    record_new_files,
)
from accel_checkpoint.leftovers import clean_leftovers, held, release
from accel_checkpoint.manager import read_object
from accel_checkpoint.manifest import Manifest, library_versions, verify_checkpoint
from accel_checkpoint.rank_writers import (
    OBJECTS_KEY,
    UNPICKLES_KEY,
    broadcast,
    check_writer,
    clean_leftovers_together,
    dist_info,
    gather,
    listing,
    load_options,
    pickle_problem,
    sharded_objects,
    whole_objects,
)
from accel_checkpoint.rollback import agree_on, all_or_nothing
from accel_checkpoint.saving import _commit, rng_name, snapshot, write_parts
from accel_checkpoint.targets import check_save_target, new_staging_dir

__all__ = ["save_rank_state", "load_rank_state", "LoadedRankState", "OBJECTS_KEY",
           "read_rank_manifest", "check_writer", "sharded_objects", "pickle_problem"]

_DATA_FILE = "_data.json"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _sync_and_hash(staging: Path, name: Any) -> tuple[str, dict[str, Any]]:
    """Check a path the writer reported, fsync it (and its directory), hash it."""
    rel = Path(name) if isinstance(name, (str, os.PathLike)) else None
    if (rel is None or rel.is_absolute() or ".." in rel.parts or not rel.parts
            or rel.as_posix() == MANIFEST_NAME):
        raise CheckpointError(f"the writer reported {name!r}: give paths relative to the "
                              f"staging directory, inside it, other than {MANIFEST_NAME}.")
    file = staging / rel
    if not file.is_file():
        raise CheckpointError(f"the writer reported {rel.as_posix()}, which it did not write.")
    fsync_file(file)
    if file.parent != staging:
        fsync_dir(file.parent)
    return rel.as_posix(), hash_file(file).to_json()


def _staging(final: Path) -> str:
    """Rank 0: the staging folder's path, or ``error:<message>`` for every rank to raise."""
    try:
        return str(new_staging_dir(final))
    except CheckpointWriteError as exc:
        return f"error:{exc}"


def _write_and_hash(writer: RankCheckpointWriter, staging: Path, objects: Mapping[str, Any],
                    data: Any, rank: int, world: int) -> dict[str, Any]:
    """The writer's files of this rank (and rank 0's ``_data.json``), hashed."""
    written = writer.save(staging, objects, rank, world)
    files = dict(_sync_and_hash(staging, name) for name in written or ())
    if rank == 0 and data is not None:
        if _DATA_FILE in files:
            raise CheckpointError(f"the writer wrote {_DATA_FILE}, which the protocol writes.")
        files[_DATA_FILE] = write_json(staging / _DATA_FILE, data).to_json()
    return files


def _prepare(prepare_dir: Callable[[Path], Any] | None, staging: Path) -> dict[str, Any]:
    """Run ``prepare_dir`` on this rank; ``{"error": ...}`` if it raised."""
    if prepare_dir is not None:
        try:
            prepare_dir(staging)
        except Exception as exc:
            return {"error": f"prepare_dir raised {_describe(exc)}"}
    return {}


def _failure(results: list[dict[str, Any]]) -> str | None:
    return next((f"rank {r}: {o['error']}" for r, o in enumerate(results) if "error" in o),
                None)


def _write_rank(writer: RankCheckpointWriter, staging: Path, objects: Mapping[str, Any],
                replicated: Mapping[str, Any] | None, data: Any, rng: bool, rank: int,
                world: int) -> dict[str, Any]:
    """This rank's part: ``{"files", "objects"}`` records, or ``{"error"}``. The objects
    are checked again (``prepare_dir`` may have changed them)."""
    try:
        whole = whole_objects(replicated, sharded_objects(objects))
        files = _write_and_hash(writer, staging, objects, data, rank, world)
        part_files, entries = write_parts(staging, snapshot(dict(whole), None, rng,
                                                            Peers(rank, world)))
        twice = sorted(set(files) & set(part_files))
        if twice:
            raise CheckpointError(f"the writer wrote {twice}, which the protocol writes for "
                                  "the replicated objects: give its files other names.")
        return {"files": {**files, **part_files}, "objects": entries}
    except Exception as exc:
        return {"error": _describe(exc)}


def _manifest(staging: Path, writer: RankCheckpointWriter, results: list[dict[str, Any]],
              prepared: set[str], step: int | None, world: int, kinds: dict[str, str],
              metadata: dict[str, Any] | None) -> Manifest:
    """Rank 0: every rank's files and objects, plus what ``prepare_dir`` wrote."""
    files: dict[str, FileRecord] = {}
    owner: dict[str, int] = {}
    for rank, outcome in enumerate(results):
        for name, record in outcome["files"].items():
            if name in owner:
                raise CheckpointError(f"{name} was reported by rank {owner[name]} and rank "
                                      f"{rank}: each file must have one writer.")
            owner[name] = rank
            files[name] = FileRecord.from_json(record)
    objects = {n: entry for o in results for n, entry in o["objects"].items()}
    overwritten = sorted(prepared & set(files))
    if overwritten:
        raise CheckpointError(f"prepare_dir wrote {overwritten}, which the save itself writes: "
                              "give those files other names (or put them in a subdirectory).")
    files.update(record_new_files(staging, set(files)))
    ranks = sorted(e["rank"] for e in objects.values() if "rank" in e) or list(range(world))
    return Manifest(files=files, objects=objects, step=step, world_size=world, ranks=ranks,
                    layout=writer.layout, created_unix=time.time(),
                    libraries=library_versions(),
                    metadata={**(metadata or {}), OBJECTS_KEY: kinds,
                              UNPICKLES_KEY: writer.unpickles})


def _everyone_entered(final: Path, layout: str, on: bool) -> None:
    if on and not SaveRound(final, Peers.current()).everyone_arrived():
        raise CheckpointError(
            f"Only rank 0 entered the save of {final} (layout {layout!r}) within "
            f"{SaveRound.peer_timeout()} s. This checkpoint needs every process (each writes "
            "its own files): call save_state on every process, not only on the main one (or "
            "raise ACCEL_CHECKPOINT_PEER_TIMEOUT if the others are just slow).")


def save_rank_state(directory: str | os.PathLike[str], writer: RankCheckpointWriter,
                    objects: Mapping[str, Any], *, data: Any = None, step: int | None = None,
                    metadata: dict[str, Any] | None = None,
                    replicated: Mapping[str, Any] | None = None, rng: bool = False,
                    prepare_dir: Callable[[Path], Any] | None = None,
                    on_commit: Callable[[Path], Any] | None = None) -> Path:
    """Save ``objects`` rank by rank through ``writer`` into ``directory``, crash-safely.

    A collective: call it on every rank. ``objects`` (models, optimizers) go to
    ``writer.save`` on every rank; rank 0 writes ``data`` (JSON) and the ``replicated``
    objects (name -> object whose state is the same on every rank) whole as safetensors +
    JSON; ``rng``: each rank writes its RNG states. ``prepare_dir(staging)`` runs on every
    rank once the staging directory exists and before any state is written; the files it
    creates are committed and listed in the manifest; it may still change ``objects`` and
    ``replicated`` (dicts). ``on_commit(path)`` runs on rank 0
    after the commit (rotation). Every rank returns the committed path, or raises if any
    rank failed (nothing is committed then; a previous checkpoint at ``directory`` stays).
    """
    writer = check_writer(writer)
    final = Path(directory)
    rank, world, on = dist_info()
    whole_objects(replicated, sharded_objects(objects))  # refuse bad objects before any file
    check_save_target(final)  # on every rank: all refuse alike, before anything is written
    _everyone_entered(final, writer.layout, on)
    made = _staging(final) if rank == 0 else None
    made = broadcast(made, on)
    if made.startswith("error:"):
        raise CheckpointWriteError(final, made.removeprefix("error:"))
    staging = Path(made)
    with held(staging) if rank != 0 else nullcontext():  # rank 0 holds it since it made it
        error = _failure(gather(_prepare(prepare_dir, staging), on))
        prepared = listing(staging) if rank == 0 and error is None else set()
        # No rank may write before rank 0 has listed what the hooks wrote: a rank file
        # already there would be taken for a hook's file (and refused as overwritten).
        broadcast(None, on)
        results: list[dict[str, Any]] = []
        if error is None:
            results = gather(_write_rank(writer, staging, objects, replicated, data, rng,
                                          rank, world), on)
            error = _failure(results)
    committed, hook_error = False, None
    if rank == 0 and error is None:
        try:
            _commit(staging, final, _manifest(staging, writer, results, prepared, step, world,
                                              sharded_objects(objects), metadata))
            committed = True
        except Exception as exc:
            error = f"rank 0: {_describe(exc)}"
    if rank == 0 and not committed:
        shutil.rmtree(staging, ignore_errors=True)
        release(staging)
    if rank == 0 and committed:  # every rank is past writing: only leftovers are taken
        clean_leftovers(final.parent)
        try:  # rotation (after the cleaning: it counts what was put back)
            if on_commit is not None:
                on_commit(final)
        except Exception as exc:
            hook_error = _describe(exc)
    error, hook_error = broadcast([error, hook_error], on)
    if error is not None:
        raise CheckpointError(f"Save of {final} (layout {writer.layout!r}) failed, nothing "
                              f"was committed: {error}")
    if hook_error is not None:
        raise CheckpointError(f"{final} was committed, but on_commit failed on rank 0: "
                              f"{hook_error}")
    return final


@dataclass
class LoadedRankState:
    """What :func:`load_rank_state` found: the path, its manifest, the data, the step."""

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


def _raise_first(problems: list[str | None]) -> None:
    found = sorted(p for p in problems if p)
    if found:
        where, what = found[0].split("\0", 1)
        raise CorruptCheckpointError(where, what)


def _check_layout(path: Path, manifest: Manifest, layout: str) -> None:
    if manifest.layout != layout:
        raise CheckpointError(f"{path} is a {manifest.layout!r} checkpoint, not a {layout} one: "
                              f"load it with the {manifest.layout!r} layout (load_checkpoint / "
                              "Accelerator.load_state for 'replicated').")


def read_rank_manifest(path: Path, layout: str, rank: int = 0, world: int = 1,
                       on: bool = False) -> Manifest:
    """Verify a per-rank checkpoint of ``layout`` (every file; the ranks share hashing)."""
    manifest = verify_checkpoint(path, deep=False)
    _check_layout(path, manifest, layout)
    _raise_first(gather(_check_share(path, manifest, rank, world), on))
    return manifest


def _rng_state(path: Path, manifest: Manifest, rank: int) -> Any:
    """This rank's saved RNG states (``None``, with a warning, when there are none)."""
    if rng_name(rank) in manifest.objects:
        return read_object(path, rng_name(rank), manifest)
    warnings.warn(f"{path} holds no RNG state for rank {rank} (saved by {manifest.world_size} "
                  "process(es)); this rank's random draws will differ from the original run.",
                  stacklevel=4)
    return None


def _missing(path: Path, manifest: Manifest, kinds: dict[str, str], whole: dict[str, Any],
             strict: bool) -> None:
    saved = manifest.metadata.get(OBJECTS_KEY, {})
    missing = sorted(set(kinds) - set(saved)) + sorted(set(whole) - set(manifest.objects))
    if missing and strict:
        have = set(saved) | {n for n, e in manifest.objects.items() if e.get("kind") == "state"}
        raise CheckpointError(f"{path} has no object(s) {missing} (it has: "
                              f"{', '.join(sorted(have)) or 'none'}).")
    if missing:
        warnings.warn(f"{path} has no object(s) {missing}; they keep their state.", stacklevel=4)


def load_rank_state(directory: str | os.PathLike[str], writer: RankCheckpointWriter,
                    objects: Mapping[str, Any], *, strict: bool = True,
                    replicated: Mapping[str, Any] | None = None, rng: bool = False,
                    prepare: Callable[[Path], Any] | None = None,
                    trust_pickles: bool | None = None,
                    non_strict: Any = ()) -> LoadedRankState:
    """Verify ``directory`` and load it into ``objects`` through ``writer``.

    A collective: call it on every rank with objects built the way the writer expects.
    The layout must be ``writer.layout``; the whole checkpoint is hash-checked before
    anything is read (a damaged file raises ``CorruptCheckpointError`` naming it, on every
    rank). ``prepare(path)`` runs after the checks and before anything is read (load
    hooks; it may still change ``objects`` and ``replicated``, when they are dicts).
    ``replicated``: objects saved whole by rank 0. ``rng``: restore this rank's RNG
    states. ``strict``: every object must be in the checkpoint (else a warning).
    ``trust_pickles``: see :func:`pickle_problem`. ``non_strict``: names of models that load
    as ``load_state_dict(strict=False)`` (a collection read after ``prepare``, which may
    fill it); the writer must say ``loads_non_strict`` (else refused, nothing changed).

    A load that fails part-way changes nothing on any rank (:mod:`accel_checkpoint.rollback`):
    the replicated objects and RNG states load first and every rank reports how it went
    before any enters ``writer.load``; a failure there is agreed on too, and every rank puts
    back what it had changed. The writer's objects are kept first (a CPU copy of each
    model's local tensors and each optimizer's state) only when the writer says
    ``loads_in_place`` (its load writes only into those tensors: DCP's does); otherwise a
    failing ``writer.load`` leaves its objects as it left them (the rest is put back).
    """
    writer = check_writer(writer)
    path = Path(directory)
    rank, world, on = dist_info()
    clean_leftovers_together(path.parent, rank, on)  # may put back a parked `path`
    manifest = verify_checkpoint(path, deep=False)
    _check_layout(path, manifest, writer.layout)
    # Refused on every rank alike (the writer's load may be a collective), before hashing.
    problems = gather(pickle_problem(path, manifest, writer, trust_pickles), on)
    refused = next((p for p in problems if p), None)
    if refused is not None:
        raise CheckpointError(refused)
    _raise_first(gather(_check_share(path, manifest, rank, world), on))
    if prepare is not None:
        prepare(path)
    kinds = sharded_objects(objects)
    whole = whole_objects(replicated, kinds)
    _missing(path, manifest, kinds, whole, strict)
    # Read what the writer does not first: nothing changes if a file turns out unreadable.
    states = {n: read_object(path, n, manifest) for n in whole if n in manifest.objects}
    rng_state = _rng_state(path, manifest, rank) if rng else None
    saved = manifest.metadata.get(OBJECTS_KEY, {})
    chosen = {n: o for n, o in objects.items() if n in saved}
    refuse_misfits(path, [(n, whole[n], st) for n, st in states.items()])  # before the writer
    options = load_options(path, writer, manifest, set(non_strict) & set(chosen))  # refuse first
    data = None
    if _DATA_FILE in manifest.files:
        data = read_json(path / _DATA_FILE, manifest.files[_DATA_FILE])
    with all_or_nothing() as rollback:
        # What this rank loads itself goes first, and every rank says how it went: a rank
        # that failed must not leave the others waiting in the writer's (collective) load.
        agree_on(path, on, lambda: apply_states(
            path, [(name, whole[name], state) for name, state in states.items()], rng_state))
        if chosen:
            if getattr(writer, "loads_in_place", False):  # a copy kept restores them
                for obj in chosen.values():
                    rollback.keep(obj, copy=True)
            agree_on(path, on, lambda: writer.load(path, chosen, rank, world, **options))
    return LoadedRankState(path, manifest, data, manifest.step)


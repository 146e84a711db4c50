"""``manifest.json``: what a complete checkpoint contains, and the checks against it.

A save writes the manifest last, just before the atomic rename, so a directory without a
readable manifest is a partial checkpoint. The manifest lists every file with its size and
digests (:mod:`accel_checkpoint.hashing`); verification checks presence and size always
(cheap) and every byte when ``deep``. Standard library (and xxhash) only, so the
``accel checkpoint`` verbs and other tools can inspect checkpoints without torch.

The manifest protects itself (since format 3; the current one is 4, whose file records
name their digest algorithm, xxh3-128 by default): ``manifest_sha256`` is the sha256 of its
canonical JSON (every other key, sorted, no whitespace), checked before anything in it is
believed, so any change to what it says is refused as "manifest.json is corrupt". A
change that leaves the parsed content identical (whitespace between tokens) changes
nothing a reader believes and is accepted. Manifests of formats 1 and 2 (written before
the self-digest) carry none and are read as they are; a format-3 manifest without its
digest, or an older one with a digest key, is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any

from accel_checkpoint.constants import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_DIGEST_KEY,
    MANIFEST_NAME,
    LEFTOVER_INFIXES,
    OLD_INFIX,
    SEALED_FORMAT_VERSION,
    TMP_INFIX,
    TRASH_INFIX,
)
from accel_checkpoint.containment import check_names, inside
from accel_checkpoint.durability import fsync_dir
from accel_checkpoint.hashing import (
    HASH_CHUNK,
    FileRecord,
    Verification,
    hash_file,
)
from accel_checkpoint.recognise import accel_files, is_save_leftover

__all__ = ["FileRecord", "Manifest", "CheckpointInfo", "hash_file", "fsync_dir",
           "library_versions", "read_manifest", "verify_checkpoint", "list_checkpoints",
           "latest_checkpoint", "is_staging_dir", "HASH_CHUNK", "manifest_digest",
           "check_folder", "next_step"]


def _corrupt(path: object, problem: str) -> Exception:
    from accel_checkpoint.errors import CorruptCheckpointError  # imports accel_state (torch)

    return CorruptCheckpointError(path, problem)


def _bad_manifest(where: object, problem: str) -> Exception:
    return _corrupt(where, f"{MANIFEST_NAME} is corrupt: {problem}. Do not trust this "
                    "checkpoint; load an earlier one")


def manifest_digest(content: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``content`` without its own digest key:
    keys sorted, no whitespace, ASCII only, so only what the manifest says is hashed."""
    body = {k: v for k, v in content.items() if k != MANIFEST_DIGEST_KEY}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_seal(data: dict[str, Any], where: Path) -> None:
    """Refuse a manifest whose content does not match its own digest, a format-3 one
    without a digest, and an older one that has a digest key (a changed version)."""
    version = data.get("format_version")
    if MANIFEST_DIGEST_KEY not in data:
        if not isinstance(version, int) or isinstance(version, bool) or version >= \
                SEALED_FORMAT_VERSION:
            raise _bad_manifest(where, f"it has no {MANIFEST_DIGEST_KEY} (its own digest), "
                                f"which every format-{SEALED_FORMAT_VERSION} manifest has")
        return  # format 1 or 2: written before manifests carried their digest
    recorded = data[MANIFEST_DIGEST_KEY]
    if recorded != manifest_digest(data):
        raise _bad_manifest(where, f"its content does not match its own digest "
                            f"({MANIFEST_DIGEST_KEY}): it was changed after it was written")


@dataclass
class Manifest:
    """The parsed ``manifest.json`` of one checkpoint."""

    files: dict[str, FileRecord]
    """Every file of the checkpoint (relative path -> size and chunk digests: xxh3-128 by
    default, sha256 on request)."""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Saved objects by name: ``{"kind": ..., "tensors": file|None, "json": file|None}``."""
    step: int | None = None
    """Training step given to the save (``None`` when not given)."""
    world_size: int = 1
    """Number of processes of the run that saved it."""
    ranks: list[int] = field(default_factory=lambda: [0])
    """Ranks whose per-rank files (RNG states) are present."""
    layout: str = "replicated"
    """``replicated``: every rank holds the full model and optimizer state."""
    created_unix: float = 0.0
    """Wall-clock time of the commit (orders checkpoints for "latest")."""
    libraries: dict[str, str] = field(default_factory=dict)
    """Versions of Python, torch, safetensors and accel packages that wrote it."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form JSON given by the caller."""
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """The manifest as written (always the current format), with its own digest."""
        content = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                   "step": self.step, "world_size": self.world_size, "ranks": self.ranks,
                   "layout": self.layout, "created_unix": self.created_unix,
                   "libraries": self.libraries, "metadata": self.metadata,
                   "objects": self.objects,
                   "files": {name: rec.to_json() for name, rec in sorted(self.files.items())}}
        # The digest covers what a reader will parse (tuples become lists, int keys text).
        content = json.loads(json.dumps(content))
        content[MANIFEST_DIGEST_KEY] = manifest_digest(content)
        return content

    @classmethod
    def from_json(cls, data: Any, where: Path) -> Manifest:
        if not isinstance(data, dict):
            raise _bad_manifest(where, "it is not a JSON object")
        _check_seal(data, where)
        if data.get("format") != FORMAT_NAME:
            raise _bad_manifest(where, f"it is not an {FORMAT_NAME} manifest")
        version = data.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise _corrupt(where, f"format_version {version!r} is newer than this accel-"
                           f"checkpoint reads ({FORMAT_VERSION}): upgrade accel-checkpoint")
        try:
            files = {name: FileRecord.from_json(rec) for name, rec in data["files"].items()}
            manifest = cls(
                files=files, objects=dict(data.get("objects", {})), step=data.get("step"),
                world_size=int(data.get("world_size", 1)), ranks=list(data.get("ranks", [0])),
                layout=data.get("layout", "replicated"),
                created_unix=float(data.get("created_unix", 0.0)),
                libraries=dict(data.get("libraries", {})),
                metadata=dict(data.get("metadata", {})), format_version=version)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _bad_manifest(where, f"malformed ({type(exc).__name__}: {exc})") from None
        check_names(manifest.files, where)
        manifest.check_objects(where)
        return manifest

    def check_objects(self, where: Path) -> None:
        """Refuse an object entry whose files are not listed (or of the wrong shape)."""
        for name, entry in self.objects.items():
            if not isinstance(entry, dict):
                raise _bad_manifest(where, f"object {name!r} is {entry!r}, not an entry")
            for key in ("tensors", "json"):
                file = entry.get(key)
                if file is not None and (not isinstance(file, str) or file not in self.files):
                    raise _bad_manifest(where, f"object {name!r} names {key} file {file!r}, "
                                        "which the manifest does not list")


def library_versions() -> dict[str, str]:
    """Versions recorded in each manifest (for reproducing a run and reading old files)."""
    found = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("torch", "safetensors", "numpy", "accel-checkpoint", "accel-state", "accel"):
        try:
            found[dist] = _metadata.version(dist)
        except _metadata.PackageNotFoundError:
            continue
    return found


def is_staging_dir(path: Path) -> bool:
    """A folder a save or rotation works in (see ``recognise.is_save_leftover``)."""
    return is_save_leftover(path)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The manifest of the checkpoint directory ``path``; refuses a partial one."""
    path = Path(path)
    check_folder(path)
    where = inside(path, MANIFEST_NAME, path)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        raise _corrupt(where, f"missing: {_without_manifest(path)}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # also bytes that are not UTF-8
        raise _bad_manifest(where, f"invalid JSON ({exc})") from None
    return Manifest.from_json(data, where)


def check_folder(path: Path) -> None:
    """Refuse what is not a checkpoint folder to load: a missing path
    (``CheckpointNotFoundError``), a file, a save's staging folder, a parked old copy."""
    if not path.exists():
        from accel_checkpoint.errors import CheckpointNotFoundError

        raise CheckpointNotFoundError(path, f"{path}: no such checkpoint folder. Check the "
                                      "path (`accel checkpoint list <parent>` lists the "
                                      "checkpoints under a folder).")
    if not path.is_dir():
        raise _corrupt(path, "a file, not a checkpoint folder")
    if TMP_INFIX in path.name:
        raise _corrupt(path, "the staging folder of an interrupted save (it was never renamed "
                       "into place), a partial checkpoint: it is never loaded, whatever it "
                       "holds; load an earlier checkpoint")
    if OLD_INFIX in path.name:
        final = path.name.split(OLD_INFIX)[0]
        raise _corrupt(path, "the previous copy of a checkpoint, parked while a save replaced "
                       f"it (the save renames the new one to {final!r}, then deletes this): it "
                       f"is never loaded; load {path.parent / final} instead")
    if TRASH_INFIX in path.name:
        raise _corrupt(path, "a checkpoint that total_limit's rotation was deleting: it is "
                       "never loaded; load a newer checkpoint")


def _without_manifest(path: Path) -> str:
    """What a folder without a manifest is: a partial accel checkpoint, or no checkpoint."""
    own = accel_files(path)
    if own:
        shown = ", ".join(own[:5]) + (f" and {len(own) - 5} more" if len(own) > 5 else "")
        return (f"the folder holds accel's own checkpoint files ({shown}) but no manifest, so "
                "it is a partial accel checkpoint (its save did not finish, or the manifest "
                "was removed): it is not loaded, neither as accel's nor as an Accelerate "
                "checkpoint; load an earlier one")
    return ("this is a partial checkpoint (its save did not finish) or not a checkpoint at "
            "all; load an earlier one")


def verify_checkpoint(path: str | os.PathLike[str], deep: bool = True,
                      fast: bool = False, manifest: Manifest | None = None) -> Manifest:
    """Check a checkpoint against its manifest; raise ``CorruptCheckpointError`` naming the
    first bad file. ``deep=False`` checks presence and sizes only (no reading); ``deep``
    checks every byte against each record's digests: xxh3-128 records (the default) with
    xxh3-128; sha256 records with sha256, or with their xxh3-128 chunk digests when
    ``fast`` and they have them.
    ``manifest``: the one already read from ``path`` (else it is read here)."""
    path = Path(path)
    manifest = manifest if manifest is not None else read_manifest(path)
    for name, record in manifest.files.items():
        file = inside(path, name, path / MANIFEST_NAME)
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise _corrupt(file, "listed in the manifest but missing") from None
        if size != record.size:
            raise _corrupt(file, f"size is {size} bytes but the manifest says {record.size}")
    if deep:
        Verification(path, manifest.files, fast=fast).wait()
    return manifest


@dataclass
class CheckpointInfo:
    """One entry of :func:`list_checkpoints`."""

    path: Path
    status: str
    """``ok``, ``partial`` (no manifest: an interrupted save) or ``corrupt``."""
    manifest: Manifest | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_NUMBER = re.compile(r"(\d+)")


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in _NUMBER.split(name)]


def list_checkpoints(root: str | os.PathLike[str], deep: bool = False,
                     pattern: str | None = None) -> list[CheckpointInfo]:
    """Checkpoint directories under ``root``, oldest first (by commit time, then name).

    Staging directories of interrupted saves are listed as ``partial``. ``pattern`` (a
    regex) keeps only matching names; ``deep`` hashes every file.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    regex = re.compile(pattern) if pattern else None
    infos: list[CheckpointInfo] = []
    for child in root.iterdir():
        if not child.is_dir():
            continue
        base = child.name
        for infix in LEFTOVER_INFIXES:
            base = base.split(infix)[0]
        if regex is not None and not regex.fullmatch(base):
            continue
        if not (child / MANIFEST_NAME).exists() and not is_staging_dir(child):
            continue  # not a checkpoint at all (e.g. a logging directory)
        try:
            infos.append(CheckpointInfo(child, "ok", verify_checkpoint(child, deep=deep)))
        except Exception as exc:  # CorruptCheckpointError, named lazily
            partial = is_staging_dir(child) or not (child / MANIFEST_NAME).exists()
            status = "partial" if partial else "corrupt"
            infos.append(CheckpointInfo(child, status, problem=str(exc)))
    infos.sort(key=lambda i: (i.manifest.created_unix if i.manifest else 0.0,
                              _natural(i.path.name)))
    return infos


def latest_checkpoint(root: str | os.PathLike[str], pattern: str | None = None) -> Path | None:
    """The newest checkpoint under ``root`` whose manifest and file sizes check out."""
    ok = [info for info in list_checkpoints(root, pattern=pattern) if info.ok]
    return ok[-1].path if ok else None


def next_step(path: str | os.PathLike[str]) -> str:
    """What to do after the checkpoint ``path`` was refused: load the newest complete
    checkpoint beside it (its manifest and sizes check out), or check one by hand."""
    path = Path(path)
    parent = path.parent
    try:
        here = path.resolve()
        others = [i.path for i in list_checkpoints(parent) if i.ok and i.path.resolve() != here]
    except OSError:
        others = []
    if others:
        newest = others[-1]
        return (f"The newest complete checkpoint beside it is {newest}: load that one "
                f"(`accel checkpoint verify {newest}` checks every byte first).")
    return (f"No other complete checkpoint is under {parent}; check one with `accel checkpoint "
            f"verify <path>` (`accel checkpoint list {parent}` lists them).")


def now() -> float:
    return time.time()

"""``manifest.json``: what a complete checkpoint contains, and the checks against it.

A save writes the manifest last, just before the atomic rename, so a directory without a
readable manifest is a partial checkpoint. The manifest lists every file with its size and
digests (:mod:`accel_checkpoint.hashing`); verification checks presence and size always
(cheap) and every byte when ``deep``. Standard library (and xxhash) only, so the
``accel checkpoint`` verbs and other tools can inspect checkpoints without torch.
"""

from __future__ import annotations

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
    MANIFEST_NAME,
    OLD_INFIX,
    TMP_INFIX,
)
from accel_checkpoint.hashing import HASH_CHUNK, FileRecord, Verification, fsync_dir, hash_file

__all__ = ["FileRecord", "Manifest", "CheckpointInfo", "hash_file", "fsync_dir",
           "library_versions", "read_manifest", "verify_checkpoint", "list_checkpoints",
           "latest_checkpoint", "is_staging_dir", "HASH_CHUNK"]


def _corrupt(path: object, problem: str) -> Exception:
    from accel_checkpoint.errors import CorruptCheckpointError  # imports accel_state (torch)

    return CorruptCheckpointError(path, problem)


@dataclass
class Manifest:
    """The parsed ``manifest.json`` of one checkpoint."""

    files: dict[str, FileRecord]
    """Every file of the checkpoint (relative path -> size and sha256)."""
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
        return {"format": FORMAT_NAME, "format_version": self.format_version,
                "step": self.step, "world_size": self.world_size, "ranks": self.ranks,
                "layout": self.layout, "created_unix": self.created_unix,
                "libraries": self.libraries, "metadata": self.metadata,
                "objects": self.objects,
                "files": {name: rec.to_json() for name, rec in sorted(self.files.items())}}

    @classmethod
    def from_json(cls, data: Any, where: Path) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise _corrupt(where, f"not an {FORMAT_NAME} manifest")
        version = data.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise _corrupt(where, f"format_version {version!r} is newer than this accel-"
                           f"checkpoint reads ({FORMAT_VERSION}): upgrade accel-checkpoint")
        try:
            files = {name: FileRecord.from_json(rec) for name, rec in data["files"].items()}
            return cls(files=files, objects=dict(data.get("objects", {})), step=data.get("step"),
                       world_size=int(data.get("world_size", 1)),
                       ranks=list(data.get("ranks", [0])), layout=data.get("layout", "replicated"),
                       created_unix=float(data.get("created_unix", 0.0)),
                       libraries=dict(data.get("libraries", {})),
                       metadata=dict(data.get("metadata", {})), format_version=version)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _corrupt(where, f"malformed manifest ({type(exc).__name__}: {exc})") from None


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
    """A save's temporary sibling (``name.tmp-id``) or a parked old copy (``name.old-id``)."""
    return TMP_INFIX in path.name or OLD_INFIX in path.name


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The manifest of the checkpoint directory ``path``; refuses a partial one."""
    path = Path(path)
    if not path.is_dir():
        raise _corrupt(path, "no such checkpoint directory")
    if is_staging_dir(path):
        raise _corrupt(path, "this is the staging directory of an interrupted save (it was "
                       "never renamed into place), a partial checkpoint; load an earlier one")
    where = path / MANIFEST_NAME
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        raise _corrupt(where, "missing: this is a partial checkpoint (its save did not "
                       "finish); load an earlier one") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _corrupt(where, f"invalid JSON ({exc})") from None
    return Manifest.from_json(data, where)


def verify_checkpoint(path: str | os.PathLike[str], deep: bool = True,
                      fast: bool = False, manifest: Manifest | None = None) -> Manifest:
    """Check a checkpoint against its manifest; raise ``CorruptCheckpointError`` naming the
    first bad file. ``deep=False`` checks presence and sizes only (no reading); ``deep``
    checks every byte with sha256, or with the xxh3-128 digests when ``fast``.
    ``manifest``: the one already read from ``path`` (else it is read here)."""
    path = Path(path)
    manifest = manifest if manifest is not None else read_manifest(path)
    for name, record in manifest.files.items():
        file = path / name
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
        base = child.name.split(TMP_INFIX)[0].split(OLD_INFIX)[0]
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


def now() -> float:
    return time.time()

"""``manifest.json``: what a complete checkpoint contains, and the checks against it.

A save writes the manifest last, just before the atomic rename, so a directory without a
readable manifest is a partial checkpoint. The manifest lists every file with its size and
sha256; verification checks presence and size always (cheap) and the sha256 when
``deep`` (reads every byte). This module uses only the standard library, so the
``accel checkpoint`` verbs and other tools can inspect checkpoints without torch.

Format 2 hashes each file in ``HASH_CHUNK`` pieces (one sha256 per chunk, and the
record's ``sha256`` is the sha256 of the concatenated chunk digests) so the chunks of a
big file are hashed on several cores at once (hashlib releases the GIL) and a damaged
byte is named down to its chunk. Format 1 records (one sha256 of the whole file) still
verify.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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

__all__ = ["FileRecord", "Manifest", "CheckpointInfo", "hash_file", "fsync_dir",
           "library_versions", "read_manifest", "verify_checkpoint", "list_checkpoints",
           "latest_checkpoint", "is_staging_dir", "HASH_CHUNK", "record_of", "check_bytes",
           "map_file", "hash_pool", "chunk_digest", "chunked_record", "record_new_files",
           "Verification"]

#: Bytes per hashed chunk (format 2): small enough to spread a file over every core.
HASH_CHUNK = 16 * 2**20
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _corrupt(path: object, problem: str) -> Exception:
    from accel_checkpoint.errors import CorruptCheckpointError  # imports accel_state (torch)

    return CorruptCheckpointError(path, problem)


@dataclass(frozen=True)
class FileRecord:
    """Size in bytes and sha256 (hex) of one written file, as the manifest lists it."""

    size: int
    sha256: str
    """Format 2: sha256 of the concatenated chunk digests; format 1: of the whole file."""
    chunk_size: int = 0
    """Bytes per hashed chunk (``0``: a format-1 record, one sha256 of the whole file)."""
    chunks: tuple[str, ...] = ()
    """sha256 (hex) of each ``chunk_size`` piece of the file, in order."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"size": self.size, "sha256": self.sha256}
        if self.chunk_size:
            out.update(chunk_size=self.chunk_size, chunks=list(self.chunks))
        return out

    @classmethod
    def from_json(cls, rec: Any) -> FileRecord:
        chunk_size = int(rec.get("chunk_size", 0))
        chunks = tuple(str(c) for c in rec.get("chunks", ()))
        if chunk_size and len(chunks) != -(-int(rec["size"]) // chunk_size):
            raise ValueError(f"{len(chunks)} chunk digests for {rec['size']} bytes")
        return cls(int(rec["size"]), str(rec["sha256"]), chunk_size, chunks)


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


def hash_pool() -> ThreadPoolExecutor:
    """The process-wide threads that hash chunks (one per core)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, min(32, os.cpu_count() or 1)),
                                       thread_name_prefix="accel-checkpoint-sha256")
        return _POOL


def chunk_digest(pieces: Sequence[Any]) -> bytes:
    """sha256 of the concatenation of ``pieces`` (buffers), without joining them."""
    sha = hashlib.sha256()
    for piece in pieces:
        sha.update(piece)
    return sha.digest()


def chunked_record(size: int, chunk_size: int, digests: Sequence[bytes]) -> FileRecord:
    """The format-2 record of a file of ``size`` bytes from its chunk digests."""
    return FileRecord(size, hashlib.sha256(b"".join(digests)).hexdigest(), chunk_size,
                      tuple(d.hex() for d in digests))


def record_of(data: Any, chunk_size: int = HASH_CHUNK) -> FileRecord:
    """The format-2 record of the bytes ``data``; chunks hashed in parallel."""
    view = memoryview(data).cast("B")
    starts = range(0, len(view), chunk_size)
    if len(starts) <= 1:
        digests = [chunk_digest([view])] if len(view) else []
    else:
        digests = list(hash_pool().map(lambda s: chunk_digest([view[s:s + chunk_size]]), starts))
    return chunked_record(len(view), chunk_size, digests)


def map_file(path: str | os.PathLike[str]) -> Any:
    """A private copy-on-write mapping of the file (no read copy; ``b""`` when empty)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)


def _submit_chunks(data: Any, record: FileRecord) -> list[Future[bytes]]:
    """Hash ``data`` on the pool the way ``record`` was made (per chunk, or whole file)."""
    view = memoryview(data).cast("B")
    if not record.chunk_size:  # format 1: one digest of the whole file
        return [hash_pool().submit(chunk_digest, [view])]
    size = record.chunk_size
    return [hash_pool().submit(chunk_digest, [view[s:s + size]])
            for s in range(0, len(view), size)]


def _check_chunks(path: object, futures: list[Future[bytes]], record: FileRecord) -> None:
    """Compare the digests of :func:`_submit_chunks` with ``record``; raise naming the chunk."""
    if not record.chunk_size:
        digest = futures[0].result().hex()
        if digest != record.sha256:
            raise _corrupt(path, f"sha256 is {digest} but the manifest says "
                           f"{record.sha256}: the file is corrupted")
        return
    size = record.chunk_size
    for index, (future, want) in enumerate(zip(futures, record.chunks)):
        got = future.result().hex()
        if got != want:
            for rest in futures:
                rest.cancel()
            end = min((index + 1) * size, record.size)
            raise _corrupt(path, f"sha256 of chunk {index} (bytes {index * size}-{end}) is "
                           f"{got} but the manifest says {want}: the file is corrupted")


def check_bytes(path: object, data: Any, record: FileRecord) -> None:
    """Raise ``CorruptCheckpointError`` naming ``path`` (and the chunk) unless ``data``
    (the file's bytes) matches ``record``."""
    size = len(memoryview(data).cast("B"))
    if size != record.size:
        raise _corrupt(path, f"size is {size} bytes but the manifest says {record.size}: "
                       "the file is truncated or was changed")
    _check_chunks(path, _submit_chunks(data, record), record)


class Verification:
    """The sha256 check of a set of checkpoint files, running on the hash pool.

    Every chunk of every file is submitted at once (the files are hashed in parallel);
    :meth:`wait` raises ``CorruptCheckpointError`` naming the first bad file (in name
    order), the same error on every later call. Each file is hashed through its own
    read-only mapping, so tensors loaded from the checkpoint (copy-on-write mappings) may
    already be in use while this runs.
    """

    def __init__(self, path: str | os.PathLike[str], files: dict[str, FileRecord]) -> None:
        self.path = Path(path)
        self._jobs: list[tuple[Path, FileRecord, list[Future[bytes]]]] = []
        self._error: BaseException | None = None
        self._checked = False
        for name in sorted(files):
            record, file = files[name], self.path / name
            try:
                data = map_file(file)
            except FileNotFoundError:
                self._error = _corrupt(file, "listed in the manifest but missing")
                break
            if len(data) != record.size:
                self._error = _corrupt(file, f"size is {len(data)} bytes but the manifest "
                                       f"says {record.size}: the file is truncated or changed")
                break
            self._jobs.append((file, record, _submit_chunks(data, record)))

    def done(self) -> bool:
        """Whether every chunk has been hashed (``wait`` then returns at once)."""
        return self._checked or all(f.done() for _, _, futures in self._jobs for f in futures)

    def wait(self) -> None:
        """Block until every file is hashed; raise if one does not match the manifest."""
        if not self._checked:
            self._checked = True
            try:
                if self._error is None:
                    for file, record, futures in self._jobs:
                        _check_chunks(file, futures, record)
            except BaseException as exc:
                self._error = exc
            finally:
                for _, _, futures in self._jobs:
                    for future in futures:
                        future.cancel()
                self._jobs = []
        if self._error is not None:
            raise self._error


def hash_file(path: str | os.PathLike[str], chunk_size: int = HASH_CHUNK) -> FileRecord:
    """Size and (format-2, chunked) sha256 of an existing file."""
    return record_of(map_file(path), chunk_size)


def record_new_files(directory: str | os.PathLike[str], known: Any) -> dict[str, FileRecord]:
    """Records of the files under ``directory`` (recursively) whose relative POSIX path is
    not in ``known``: what a save pre-hook wrote into the staging directory, so that the
    manifest lists it and verification covers it. Each such file and subdirectory is
    fsynced (the hook's writer may not have), so the commit makes them durable too."""
    root = Path(directory)
    found: dict[str, FileRecord] = {}
    for dirpath, _dirs, names in os.walk(root):
        here = Path(dirpath)
        for name in names:
            rel = (here / name).relative_to(root).as_posix()
            if rel not in known:
                fd = os.open(here / name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                found[rel] = hash_file(here / name)
        if here != root:
            fsync_dir(here)
    return found


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so the names it holds (new files, a rename) are durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory fds (Windows): nothing to do
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def verify_checkpoint(path: str | os.PathLike[str], deep: bool = True) -> Manifest:
    """Check a checkpoint against its manifest; raise ``CorruptCheckpointError`` naming the
    first bad file. ``deep=False`` checks presence and sizes only (no reading)."""
    path = Path(path)
    manifest = read_manifest(path)
    for name, record in manifest.files.items():
        file = path / name
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise _corrupt(file, "listed in the manifest but missing") from None
        if size != record.size:
            raise _corrupt(file, f"size is {size} bytes but the manifest says {record.size}")
    if deep:
        Verification(path, manifest.files).wait()
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

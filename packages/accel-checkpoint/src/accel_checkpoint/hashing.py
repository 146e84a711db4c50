"""The parallel hashing that makes per-file records (size + digests) and checks files
against them; what a record is and how its digests are computed from bytes live in
:mod:`accel_checkpoint.records` (re-exported here, the one import path users know).

A file is hashed in ``HASH_CHUNK`` pieces, on a process-wide thread pool (hashlib and
xxhash release the GIL), so a big file uses every core and a damaged byte is named down to
its chunk. A record names its algorithm (``DESIGN.md`` section 5):

- ``xxh3-128`` (the default) — 128-bit, non-cryptographic and ~15x faster here (28 GB/s
  against 1.6 GB/s per core), per chunk, plus one digest of the file (xxh3-128 over the
  chunk digests). Against accidental damage (bit flips, truncation, a torn write) it is as
  good as sha256 (a random change goes unnoticed with probability 2**-128); neither
  protects against someone who can rewrite the files, since the manifest sits beside them.
- ``sha256`` (opt in with :func:`digest_algorithm`, for users who compare against digests
  published elsewhere) — per chunk, and the record's ``sha256`` is the sha256 of the
  concatenated chunk sha256s; such records carry the xxh3-128 chunk digests too, so loading
  stays fast while ``accel checkpoint verify`` checks sha256.

Records written before records named their algorithm are sha256 ones (with or without the
xxh3 chunk digests; format 1: one sha256 of the whole file). Standard library plus xxhash:
the ``accel checkpoint`` verbs use this without torch.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from accel_checkpoint.durability import fsync_dir, fsync_file
from accel_checkpoint.filebytes import (
    hash_pool,
    huge_page_buffer,
    map_file,
    prefault,
    read_and_digest,
    read_into,
)
from accel_checkpoint.records import (
    DIGESTS,
    HASH_CHUNK,
    FileRecord,
    _sha256,
    _xxh3,
    check_digest,
    chunk_digests,
    chunked_record,
    current_digest,
    digest_algorithm,
)

__all__ = ["HASH_CHUNK", "DIGESTS", "check_digest", "digest_algorithm", "current_digest",
           "FileRecord", "Verification", "chunk_digests", "chunked_record", "record_of",
           "check_bytes", "verified_reader", "hash_file", "record_new_files"]

def _corrupt(path: object, problem: str) -> Exception:
    from accel_checkpoint.errors import CorruptCheckpointError  # imports accel_state (torch)

    return CorruptCheckpointError(path, problem)


def record_of(data: Any, chunk_size: int = HASH_CHUNK) -> FileRecord:
    """The record of the bytes ``data`` (with :func:`current_digest`); chunks hashed in
    parallel."""
    sha = current_digest() == "sha256"
    view = memoryview(data).cast("B")
    starts = range(0, len(view), chunk_size)
    if len(starts) <= 1:  # small (JSON) files: not worth a trip through the pool
        digests = [chunk_digests([view], sha)] if len(view) else []
    else:
        digests = list(hash_pool().map(lambda s: chunk_digests([view[s:s + chunk_size]], sha),
                                       starts))
    return chunked_record(len(view), chunk_size, digests, sha)


def _digest_range(data: Any, start: int, length: int, algorithm: str) -> bytes:
    """``algorithm`` (``"xxh3"`` or ``"sha256"``) of ``data[start:start + length]``."""
    prefault(data, start, length)
    piece = memoryview(data).cast("B")[start:start + length]
    return _xxh3(piece) if algorithm == "xxh3" else _sha256([piece])


def _uses_xxh3(record: FileRecord, fast: bool) -> bool:
    """Whether ``record`` is checked with its xxh3-128 chunk digests: always for an
    xxh3-128 record, for a sha256 one only when ``fast`` and it has them."""
    return not record.sha256 or (fast and bool(record.xxh3))


def _submit_chunks(data: Any, record: FileRecord, fast: bool) -> list[Future[bytes]]:
    """Hash ``data`` on the pool the way ``record`` was made: per chunk with xxh3-128 (see
    :func:`_uses_xxh3`), else sha256 (per chunk, or whole file)."""
    total = len(memoryview(data).cast("B"))
    if not record.chunk_size:  # format 1: one digest of the whole file
        return [hash_pool().submit(_digest_range, data, 0, total, "sha256")]
    size = record.chunk_size
    algorithm = "xxh3" if _uses_xxh3(record, fast) else "sha256"
    return [hash_pool().submit(_digest_range, data, s, size, algorithm)
            for s in range(0, total, size)]


def _submit_reads(path: Path, data: Any, record: FileRecord, fast: bool) -> list[Future[bytes]]:
    """Read the file ``path`` into ``data`` and hash it the way ``record`` was made: with
    xxh3-128 chunk digests each chunk is one task that digests what it has just read (one
    pass over memory); otherwise the file is read first, then hashed."""
    if not (record.chunk_size and _uses_xxh3(record, fast)):
        read_into(path, data)
        return _submit_chunks(data, record, fast)
    size = record.chunk_size
    return [hash_pool().submit(_read_chunk, path, data, s, size)
            for s in range(0, len(data), size)]


def _read_chunk(path: Path, data: Any, start: int, size: int) -> bytes:
    try:
        return read_and_digest(path, data, start, size)
    except OSError as exc:  # it shrank, or vanished, after its size was checked
        raise _corrupt(path, f"could not be read whole ({exc})") from None


def _check_chunks(path: object, futures: list[Future[bytes]], record: FileRecord,
                  fast: bool) -> None:
    """Compare the digests of :func:`_submit_chunks` with ``record``; raise naming the chunk."""
    if not record.chunk_size:
        digest = futures[0].result().hex()
        if digest != record.sha256:
            raise _corrupt(path, f"sha256 is {digest} but the manifest says "
                           f"{record.sha256}: the file is corrupted")
        return
    algorithm, wanted = (("xxh3-128", record.xxh3) if _uses_xxh3(record, fast)
                         else ("sha256", record.chunks))
    size = record.chunk_size
    for index, (future, want) in enumerate(zip(futures, wanted, strict=True)):
        got = future.result().hex()
        if got != want:
            for rest in futures:
                rest.cancel()
            end = min((index + 1) * size, record.size)
            raise _corrupt(path, f"{algorithm} of chunk {index} (bytes {index * size}-{end}) "
                           f"is {got} but the manifest says {want}: the file is corrupted")


def check_bytes(path: object, data: Any, record: FileRecord, fast: bool = True) -> None:
    """Raise ``CorruptCheckpointError`` naming ``path`` (and the chunk) unless ``data``
    (the file's bytes) matches ``record``; ``fast=False`` insists on sha256 where the
    record has it."""
    size = len(memoryview(data).cast("B"))
    if size != record.size:
        raise _corrupt(path, f"size is {size} bytes but the manifest says {record.size}: "
                       "the file is truncated or was changed")
    _check_chunks(path, _submit_chunks(data, record, fast), record, fast)


def verified_reader(root: str | os.PathLike[str], files: Any) -> Any:
    """``read(path) -> bytes``: the bytes of a file under ``root``, read into memory once
    and checked against its record in ``files`` (the manifest's, by relative POSIX path),
    for readers that parse what they read (unpickle it): they then use exactly the bytes
    that were checked. A file ``files`` does not list is refused, never read."""
    base = Path(os.path.abspath(root))

    def read(path: str | os.PathLike[str]) -> bytes:
        file = Path(os.path.abspath(path))  # both relative to the same working directory
        name = file.relative_to(base).as_posix() if base in file.parents else None
        record = files.get(name) if name is not None else None
        if record is None:
            raise _corrupt(file, "not listed in the manifest, so accel does not read it")
        try:
            raw = (base / name).read_bytes()
        except FileNotFoundError:
            raise _corrupt(file, "listed in the manifest but missing") from None
        check_bytes(file, raw, record)
        return raw

    return read


class Verification:
    """The check of a set of checkpoint files against their records, on the hash pool.

    Every chunk of every file is submitted at once (the files are hashed in parallel);
    :meth:`wait` raises ``CorruptCheckpointError`` naming the first bad file (in name
    order), the same error on every later call. Each file is hashed through its own
    copy-on-write mapping, so tensors loaded from other mappings of the checkpoint may
    already be in use while this runs. ``keep=True``: once :meth:`wait` has passed,
    :meth:`take` hands a file's mapping to its reader (the very bytes that were checked,
    their pages already mapped) and :meth:`release` drops those not taken; otherwise a
    mapping lives only until its chunks are hashed (an open mapping pins the file's disk
    space after rotation deletes it). Files named in ``read`` (with ``keep``) are read
    into process memory instead (``allocate(size)``, default huge pages), each chunk
    hashed as it is read (:func:`~accel_checkpoint.filebytes.read_and_digest`), for
    readers that keep the tensors (an optimizer): what they keep then pins no file, and
    the bytes checked are the bytes they hold. ``fast``: xxh3-128 where the records have it
    (loading); otherwise a sha256 record is checked with sha256 (``accel checkpoint
    verify``) and an xxh3-128 one with xxh3-128.
    """

    def __init__(self, path: str | os.PathLike[str], files: dict[str, FileRecord],
                 fast: bool = True, keep: bool = False, read: Any = (),
                 allocate: Any = None) -> None:
        self.path = Path(path)
        self._mappings: dict[str, Any] = {}  # kept for take() (keep=True only)
        self._jobs: list[tuple[Path, FileRecord, list[Future[bytes]]]] = []
        self._error: BaseException | None = None
        self._checked = False
        self._fast = fast
        for name in sorted(files):
            record, file = files[name], self.path / name
            reading = keep and name in read
            try:
                data = ((allocate or huge_page_buffer)(os.stat(file).st_size) if reading
                        else map_file(file))
            except FileNotFoundError:
                self._error = _corrupt(file, "listed in the manifest but missing")
                break
            if len(data) != record.size:
                self._error = _corrupt(file, f"size is {len(data)} bytes but the manifest "
                                       f"says {record.size}: the file is truncated or changed")
                break
            if keep:
                self._mappings[name] = data
            futures = (_submit_reads(file, data, record, fast) if reading
                       else _submit_chunks(data, record, fast))
            self._jobs.append((file, record, futures))

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
                        _check_chunks(file, futures, record, self._fast)
            except BaseException as exc:
                self._error = exc
                self._mappings.clear()
            finally:
                for _, _, futures in self._jobs:
                    for future in futures:
                        future.cancel()
                self._jobs = []
        if self._error is not None:
            raise self._error

    def take(self, name: str) -> Any:
        """The verified mapping of file ``name`` (its bytes), handed over once: the caller
        owns it from then on. Waits for the check first; None when the file was not part of
        it (or ``keep`` was False)."""
        self.wait()
        return self._mappings.pop(name, None)

    def release(self) -> None:
        """Drop the mappings nobody took (files checked but not read)."""
        self._mappings.clear()


def hash_file(path: str | os.PathLike[str], chunk_size: int = HASH_CHUNK) -> FileRecord:
    """The record (size, chunk digests with :func:`current_digest`) of an existing file."""
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
                fsync_file(here / name)
                found[rel] = hash_file(here / name)
        if here != root:
            fsync_dir(here)
    return found

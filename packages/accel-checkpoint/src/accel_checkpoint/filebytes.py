"""A checkpoint file's bytes in this process: a private mapping, or a copy in fresh memory.

A mapping costs nothing up front but keeps the file (and its disk space) alive as long as
a tensor views it; a copy costs a read but pins nothing once the file is deleted, which is
what a reader that keeps the tensors (an optimizer) needs. Copies are read on the
process-wide thread pool, in huge pages where the kernel offers them, and
:func:`read_and_digest` hashes each piece right after reading it, while it is still in the
core's cache, so a verified copy passes over memory once. Standard library plus xxhash.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import xxhash

__all__ = ["hash_pool", "FileMapping", "map_file", "prefault", "huge_page_buffer",
           "read_file", "read_into", "read_and_digest"]

#: Bytes read by one task of :func:`read_file` (the hashed chunk size of format 2).
READ_CHUNK = 16 * 2**20
#: Bytes read and then digested in turn by :func:`read_and_digest` (fits a core's L2).
_READ_PIECE = 256 * 2**10
#: madvise(2) advice that maps a range's pages in one call (Linux >= 5.14; Python < 3.13
#: lacks the name). Older kernels refuse it with EINVAL, which is ignored.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None)
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def hash_pool() -> ThreadPoolExecutor:
    """The process-wide threads that read and hash chunks (one per core)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, min(32, os.cpu_count() or 1)),
                                       thread_name_prefix="accel-checkpoint-hash")
        return _POOL


class FileMapping(mmap.mmap):
    """A private copy-on-write mapping of a file (what :func:`map_file` returns): a tensor
    viewing it keeps the file, unlike one viewing fresh memory (itself an anonymous mmap
    when it comes from :func:`huge_page_buffer`)."""


def map_file(path: str | os.PathLike[str]) -> Any:
    """A :class:`FileMapping` of the file (no read copy; ``b""`` when empty)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return b""
        return FileMapping(handle.fileno(), size, access=mmap.ACCESS_COPY)


def prefault(data: Any, start: int, length: int) -> None:
    """Map the pages of ``data[start:start + length]`` in one call when ``data`` is a file
    mapping: hashing it then takes no page fault per 4 KiB (~20% faster here), and whoever
    reads the same mapping afterwards (tensors viewing it) finds the pages mapped."""
    if _MADV_POPULATE_READ is not None and isinstance(data, FileMapping):
        try:
            data.madvise(_MADV_POPULATE_READ, start, length)
        except (OSError, ValueError):  # an older kernel: the hash faults the pages in
            pass


def huge_page_buffer(size: int) -> Any:
    """``size`` writable bytes of fresh anonymous memory, in transparent huge pages where
    the kernel offers them: filling it takes ~4x less time here than 4 KiB pages (their
    page faults, not the copy, are most of reading a file into fresh memory). Freed when
    the last reference goes (a tensor viewing it holds one)."""
    if size == 0:
        return bytearray()
    data = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            data.madvise(advice)
        except OSError:  # no transparent huge pages here: 4 KiB pages
            pass
    return data


def read_file(path: str | os.PathLike[str], allocate: Any = None) -> Any:
    """The file's bytes copied into process memory (``allocate(size)``, default
    :func:`huge_page_buffer`), read in parallel on the hash pool: unlike :func:`map_file`,
    nothing keeps the file open or mapped afterwards, so tensors kept from it pin no disk
    space once it is deleted."""
    data = (allocate or huge_page_buffer)(os.stat(path).st_size)
    read_into(path, data)
    return data


def read_into(path: str | os.PathLike[str], data: Any) -> None:
    """Fill ``data`` (writable, of the file's size) with the file's bytes, in parallel on
    the hash pool."""
    view = memoryview(data).cast("B")
    with open(path, "rb") as handle:
        for done in hash_pool().map(lambda s: _read_range(handle.fileno(), view, s),
                                    range(0, len(view), READ_CHUNK)):
            if not done:
                raise OSError(f"{path} changed size while it was read")


def _read_range(fd: int, view: memoryview, start: int) -> bool:
    """Fill ``view[start:start + READ_CHUNK]`` from the file ``fd``; False if it ends early."""
    part = view[start:start + READ_CHUNK]
    while len(part):
        got = os.preadv(fd, [part], start)
        if got == 0:
            return False
        part, start = part[got:], start + got
    return True


def read_and_digest(path: str | os.PathLike[str], data: Any, start: int, length: int) -> bytes:
    """Fill ``data[start:start + length]`` from the same bytes of the file at ``path`` and
    return their xxh3-128: each piece is digested right after it is read, from the cache,
    so the bytes are checked exactly as they now sit in ``data``. Raises ``OSError`` if the
    file ends early (it shrank after its size was checked)."""
    view = memoryview(data).cast("B")[start:start + length]
    digest = xxhash.xxh3_128()
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while done < len(view):
            part = view[done:done + _READ_PIECE]
            got = os.preadv(fd, [part], start + done)
            if got == 0:
                raise OSError(f"{path} ended at byte {start + done} while it was read: it "
                              "changed after its size was checked")
            digest.update(part[:got])
            done += got
    finally:
        os.close(fd)
    return digest.digest()

"""Durability of what a save writes: fsync of files and directories, and flushes run on a
second thread while the next file is written (a disk flushes one file while the next fills
the page cache). Standard library only."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["BackgroundFlusher", "fsync_file", "fsync_dir"]


class BackgroundFlusher:
    """Runs flushes (an fsync, an fsync then a rename) one at a time on a second thread
    while the caller writes the next file, so a disk flushes one file while the next fills
    the page cache. Leaving the ``with`` block waits for every flush, then re-raises the
    first that failed (unless the block itself raised: that error goes on)."""

    def __enter__(self) -> BackgroundFlusher:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-fsync")
        self._flushes: list[Future[Any]] = []
        return self

    def submit(self, flush: Any, *args: Any) -> None:
        self._flushes.append(self._pool.submit(flush, *args))

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        self._pool.shutdown(wait=True)
        if exc_type is None:
            for flush in self._flushes:
                flush.result()


def fsync_file(path: str | os.PathLike[str]) -> None:
    """fsync a file someone else wrote (a save hook, a strategy's writer) by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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

"""Progress beacons: how the hang watchdog of `accel launch` sees each worker's steps.

A worker of a multi-process `accel launch` finds ``ACCEL_WATCHDOG_DIR`` set. :func:`attach`
then, once per process:

- maps the 32-byte file ``rank-<RANK>.progress`` in that folder: four native unsigned 64-bit
  slots (steps, pid, rank, local rank). ``Accelerator.backward`` adds 1 to the steps slot
  when it is entered: an increment in mapped memory, no syscall, so the step pays nothing
  measurable; the launcher reads the file through the shared page cache.
- registers :mod:`faulthandler` on SIGUSR1 to write every thread's Python stack into
  ``rank-<RANK>.stack``, so the launcher can ask a hung rank where it is.

Counting on *entry* of backward is deliberate: when one rank never arrives at a step's
gradient all-reduce, the ranks waiting in it have counted that step and the missing rank has
not, so the lowest count names the rank the others wait for. The launcher (layer 2) and the
facade (layer 3) share this format, so it lives here, below both.
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
import os
import re
import signal
from dataclasses import dataclass
from typing import IO

from accel_state import env

__all__ = ["RankProgress", "attach", "detach", "progress_path", "read_progress", "stack_path"]

_SLOTS = 4  # steps, pid, rank, local rank
_SIZE = 8 * _SLOTS
_NAME = re.compile(r"^rank-(\d+)\.progress$")

_view: memoryview | None = None
_mapping: mmap.mmap | None = None
_stack_file: IO[str] | None = None


def progress_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.progress")


def stack_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.stack")


def _detached() -> memoryview:
    """Same type and layout as a real beacon, so the hot path never branches."""
    return memoryview(bytearray(_SIZE)).cast("Q")


def _register_stack_dump(folder: str, rank: int) -> bool:
    """faulthandler on SIGUSR1, unless the script already handles SIGUSR1 (never steal it)."""
    global _stack_file
    sig = getattr(signal, "SIGUSR1", None)
    if sig is None or signal.getsignal(sig) not in (signal.SIG_DFL, None):
        return False
    try:
        _stack_file = open(stack_path(folder, rank), "w", encoding="utf-8")  # noqa: SIM115
        faulthandler.register(sig, file=_stack_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        return False
    return True


def _open_beacon() -> memoryview:
    global _mapping
    folder, rank = env.WATCHDOG_DIR.get(), env.RANK.get_int()
    if not folder or rank is None:
        return _detached()
    try:  # best effort: a watchdog must never be what breaks a training run
        fd = os.open(progress_path(folder, rank), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, _SIZE)
            _mapping = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return _detached()
    view = memoryview(_mapping).cast("Q")
    view[2], view[3] = rank, env.LOCAL_RANK.get_int(0) or 0
    if _register_stack_dump(folder, rank):
        view[1] = os.getpid()  # written last: a pid says "SIGUSR1 dumps my stack"
    return view


def attach() -> memoryview:
    """This process's beacon (``view[0] += 1`` counts a step); a private dummy when the
    launcher set no ``ACCEL_WATCHDOG_DIR``. Idempotent: every Accelerator shares one."""
    global _view
    if _view is None:
        _view = _open_beacon()
    return _view


def detach() -> None:
    """Undo :func:`attach` (tests; a process that wants SIGUSR1 back)."""
    global _view, _mapping, _stack_file
    if _stack_file is not None and hasattr(signal, "SIGUSR1"):
        faulthandler.unregister(signal.SIGUSR1)
        _stack_file.close()
    if _view is not None:
        _view.release()
    if _mapping is not None:
        with contextlib.suppress(BufferError):
            _mapping.close()
    _view = _mapping = _stack_file = None


@dataclass(frozen=True)
class RankProgress:
    """One worker's beacon as the launcher reads it."""

    rank: int
    local_rank: int
    pid: int
    """0 when the worker cannot dump its stack (it handles SIGUSR1 itself)."""
    steps: int
    """Calls of ``Accelerator.backward`` entered so far in this attempt."""
    stack_path: str


def read_progress(folder: str) -> dict[int, RankProgress]:
    """Every beacon in ``folder`` by rank; files still being created are skipped."""
    found: dict[int, RankProgress] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None:
            continue
        try:
            with open(entry.path, "rb") as f:
                data = f.read(_SIZE)
        except OSError:
            continue
        if len(data) < _SIZE:
            continue
        steps, pid, rank, local_rank = memoryview(data).cast("Q").tolist()
        if rank != int(match.group(1)):
            continue  # header not written yet
        found[rank] = RankProgress(rank, local_rank, pid, steps, stack_path(folder, rank))
    return found

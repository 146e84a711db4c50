"""Workers never outlive their launcher: the orphan guard and the stuck-signal watch.

Two holes let workers run on after the launcher is gone or asked to stop:

- a launcher killed outright (SIGKILL) cannot stop its workers, which torch starts in
  sessions of their own: :mod:`accel_launch.orphans` runs beside it and stops every
  process carrying the launch's token once the launcher has exited;
- a stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) runs its Python handler only when the
  main thread next executes Python code, which a launcher blocked in a native store wait
  (torch's exit barrier waits up to 300 s) does not do for minutes. The signal also lands
  on a wakeup pipe read by a thread here: if ``settle`` seconds later the main thread is
  still in the same native call made from torch's store or rendezvous code, the thread
  stops the workers itself and ends the launcher with 128 + the signal's number. Anywhere
  else (the agent's monitoring loop sleeps natively too) the main thread handles it as
  before: torch stops the workers, with their grace for a last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
from types import FrameType
from typing import Any

from accel_state import env

from accel_launch.orphans import stop_marked

__all__ = ["Lifeline"]

_STOP_SIGNALS = frozenset(int(getattr(signal, name)) for name in
                          ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, name))


#: Source files whose native calls wait on the network for minutes: torch's store helpers
#: (the exit barrier) and its rendezvous handlers.
BLOCKING_SITES = ("torch/distributed/elastic/utils/store.py",
                  "torch/distributed/elastic/rendezvous/")


def _stack_of(ident: int) -> tuple[tuple[int, int, str], ...]:
    """Where a thread is, frame by frame, innermost first (frame, instruction, file)."""
    frame: FrameType | None = sys._current_frames().get(ident)
    out = []
    while frame is not None:
        out.append((id(frame), frame.f_lasti, frame.f_code.co_filename.replace("\\", "/")))
        frame = frame.f_back
    return tuple(out)


def blocked_at(before: tuple[tuple[int, int, str], ...], after: tuple[tuple[int, int, str], ...],
               sites: tuple[str, ...] = BLOCKING_SITES) -> bool:
    """Whether two looks at a thread found it in the same call, made from one of ``sites``."""
    return bool(before) and before == after and any(site in before[0][2] for site in sites)


class Lifeline:
    """Context of one launch: :attr:`env` marks its workers (pass it to them)."""

    def __init__(self, grace: float, *, settle: float = 2.0, out: Any = None) -> None:
        self.grace, self.settle, self._out = grace, settle, out
        token = f"{os.getpid()}.{secrets.token_hex(6)}"
        self.env = {env.LAUNCH_ID.name: token}
        self._marker = f"{env.LAUNCH_ID.name}={token}".encode()
        self._guard: subprocess.Popen[bytes] | None = None
        self._guard_pipe: int | None = None
        self._wakeup: tuple[int, int] | None = None
        self._old_wakeup = -1
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()

    def __enter__(self) -> Lifeline:
        if sys.platform.startswith("linux"):
            self._start_guard()
        if threading.current_thread() is threading.main_thread():
            self._start_signal_watch()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # a watch waiting to judge the main thread stops waiting
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            os.close(self._wakeup[1])  # the watch thread reads EOF and ends
            if self._thread is not None:
                self._thread.join(timeout=self.settle + 1)
            os.close(self._wakeup[0])
            self._wakeup = None
        if self._guard_pipe is not None:
            os.close(self._guard_pipe)  # the guard wakes, finds no worker left, exits
            self._guard_pipe = None
        if self._guard is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guard.wait(timeout=10)

    # -- SIGKILL: the guard ---------------------------------------------------------------------
    def _start_guard(self) -> None:
        read_end, write_end = os.pipe()  # not inherited by the workers (O_CLOEXEC)
        own_env = {k: v for k, v in os.environ.items() if k != env.LAUNCH_ID.name}
        try:
            self._guard = subprocess.Popen(
                [sys.executable, "-m", "accel_launch.orphans", self._marker.decode(),
                 str(self.grace), str(os.getpid())],
                stdin=read_end, start_new_session=True, env=own_env)
        except OSError:
            os.close(write_end)
        else:
            self._guard_pipe = write_end
        finally:
            os.close(read_end)

    # -- a stop signal the main thread cannot act on ----------------------------------------------
    def _start_signal_watch(self) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        try:
            self._old_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(read_end)
            os.close(write_end)
            return
        self._wakeup = (read_end, write_end)
        main = threading.main_thread().ident or 0
        self._thread = threading.Thread(target=self._watch, args=(read_end, main),
                                        name="accel-signal-watch", daemon=True)
        self._thread.start()

    def _watch(self, read_end: int, main: int) -> None:
        while True:
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in _STOP_SIGNALS and self._main_is_stuck(main):
                    self._stop_now(signum)

    def _main_is_stuck(self, main: int) -> bool:
        before = _stack_of(main)
        if self._closing.wait(self.settle):
            return False  # the launch ended meanwhile: the main thread was not stuck
        return blocked_at(before, _stack_of(main))

    def _stop_now(self, signum: int) -> None:
        name = signal.Signals(signum).name
        print(f"accel launch: stopped by signal {name} while blocked in a rendezvous or barrier "
              "wait of torch; any worker left is stopped.",
              file=self._out or sys.stderr, flush=True)
        stop_marked(self._marker, self.grace)
        os._exit(128 + signum)

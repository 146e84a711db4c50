"""The guard that ends a launch's workers when the launcher itself dies (SIGKILL, OOM killer).

A launcher stopped by a signal it can handle stops its workers itself; one killed outright
cannot, and torch starts every worker in a session of its own, so nothing else would reach
them: they would train on, holding devices and ports. ``accel launch`` therefore starts this
module as a small process of its own (stdlib only, no torch) that reads a pipe whose only
writer is the launcher. The read returns when the launcher has exited, however it ended;
the guard then stops every process whose environment carries the launch's token
(``ACCEL_LAUNCH_ID``, set in the workers and inherited by their children): SIGTERM, and
SIGKILL to those still alive after the grace period. After a normal exit it finds nothing.
Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["marked_processes", "stop_marked"]


def marked_processes(marker: bytes, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Pids whose initial environment holds ``marker`` (``NAME=TOKEN``), as far as readable."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or another user's
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def stop_marked(marker: bytes, grace: float, exclude: frozenset[int] = frozenset()) -> int:
    """SIGTERM every marked process, SIGKILL those left after ``grace`` s; how many were
    found."""
    exclude = exclude | {os.getpid()}
    pids = marked_processes(marker, exclude)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = marked_processes(marker, exclude)
    _signal_all(left, signal.SIGKILL)
    return len(pids)


def main(argv: list[str]) -> int:
    """``python -m accel_launch.orphans NAME=TOKEN GRACE LAUNCHER_PID``, the launcher's pipe
    on stdin."""
    marker, grace, launcher = argv[0].encode(), float(argv[1]), argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):  # returns b"" once the launcher's end is closed
        pass
    found = stop_marked(marker, grace)
    if found:
        print(f"accel launch: the launcher (pid {launcher}) ended without stopping its "
              f"workers; its guard stopped {found} process(es) it had started.",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Which machine was lost, when a multi-machine job fails.

When a machine dies (power, kernel panic, its launcher killed), the workers of the others
fail in their next collective with a connection error, and each surviving launcher would
only report its own rank's exit. So every launcher of a static multi-machine launch beats
a counter in the rendezvous store (``alive/R``) every ``interval`` seconds once the
machines have met; a launcher whose workers failed takes a roll call (:func:`roll_call`):
the counters that do not move within a few intervals belong to machines that are gone.
While the workers run, the launcher's watchdog asks :func:`silent_machines` too: a machine
silent for :data:`LOST_AFTER` seconds ends the job at once, naming it, where the workers
would otherwise wait for it in a collective or ``init_process_group`` for many minutes.
Machine 0 holds the store: the others keep an idle connection to its port open (the one
that found it reachable) and take its end-of-file as its loss, without a store call that
would fail noisily in torch's C++ code.

The same thread says when this machine's workers have finished and its launcher waits for
the other machines in torch's exit barrier (up to 300 s, silent otherwise): one line every
``every`` seconds.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["LOST_AFTER", "Heartbeat", "active", "lost_machines_note", "silent_machines"]

_ACTIVE: list[Heartbeat] = []

#: seconds without a beat after which a machine counts as lost while the job runs (its beat
#: comes every second from an idle launcher thread: 20 missed ones are no slow machine)
LOST_AFTER = 20.0


def active() -> Heartbeat | None:
    """The heartbeat of this process's current launch, if it has one."""
    return _ACTIVE[-1] if _ACTIVE else None


def _who(entry: Mapping[str, Any] | None, rank: int) -> str:
    if not entry:
        return f"machine rank {rank}"
    where = ", ".join(x for x in (entry.get("host"), entry.get("address")) if x)
    return f"machine rank {rank}" + (f" ({where})" if where else "")


class Heartbeat:
    """Beats ``PREFIX/alive/RANK`` in ``store`` from a daemon thread."""

    def __init__(self, store: Any, prefix: str, rank: int, world: int, *,
                 line: socket.socket | None = None, interval: float = 1.0,
                 every: float = 30.0, out: Any = None) -> None:
        self.store, self.prefix, self.rank, self.world = store, prefix, rank, world
        self.line, self.interval, self.every, self._out = line, interval, every, out
        self._main = threading.main_thread().ident or 0
        self._barrier_since: float | None = None
        self._next_line = 0.0
        peer = line.getpeername() if line is not None else None
        self._host = (f"machine rank 0 ({peer[0]}, which holds the rendezvous store)" if peer
                      else "machine rank 0 (it holds the rendezvous store)")
        self._lock = threading.Lock()  # the store client is shared with the roll call
        self._heard: dict[int, tuple[int, float]] = {}  # rank -> (count, when it changed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accel-heartbeat", daemon=True)

    def key(self, *parts: object) -> str:
        return "/".join([self.prefix, *map(str, parts)])

    def start(self) -> Heartbeat:
        self._beat()
        self._thread.start()
        _ACTIVE.append(self)
        return self

    def stop(self) -> None:
        """No beat after this returns (a roll call right after must see this machine
        silent)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.line is not None:
            self.line.close()
            self.line = None

    def host_alive(self) -> bool:
        """Whether machine 0's end of the idle connection is still open (always true on
        machine 0, or without one)."""
        line = self.line
        if line is None:
            return True
        try:
            readable, _, _ = select.select([line], [], [], 0)
            return not readable or line.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def _beat(self) -> None:
        with self._lock:
            self.store.add(self.key("alive", self.rank), 1)

    def _in_exit_barrier(self) -> bool:
        frame = sys._current_frames().get(self._main)
        while frame is not None:
            if frame.f_code.co_name == "_exit_barrier":  # torch's agent, workers done
                return True
            frame = frame.f_back
        return False

    def _say_where(self) -> None:
        if not self._in_exit_barrier():
            self._barrier_since = None
            return
        now = time.monotonic()
        if self._barrier_since is None:
            self._barrier_since, self._next_line = now, now + self.every
        elif now >= self._next_line:
            self._next_line = now + self.every
            print(f"accel launch: this machine's workers have finished; waiting for the other "
                  f"machines to finish ({now - self._barrier_since:.0f} s of torch's 300 s "
                  "exit barrier)", file=self._out or sys.stderr, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._say_where()
            if not self.host_alive():
                return
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - machine 0 gone: the roll call will say so
                return

    def silent(self, after: float = LOST_AFTER) -> list[str]:
        """The machines (by name) that have not beaten for ``after`` s - machine 0 as soon as
        its connection closed - without waiting. None while this machine's workers have
        finished (torch's exit barrier: the others may leave first)."""
        if self._in_exit_barrier():
            return []
        if not self.host_alive():
            return [self._host]
        try:
            counts = self._counts()
        except Exception:  # noqa: BLE001 - the store is machine 0's
            return [self._host]
        now, silent = time.monotonic(), []
        for rank, count in counts.items():
            heard = self._heard.get(rank)
            if heard is None or heard[0] != count:
                self._heard[rank] = (count, now)
            elif now - heard[1] >= after:
                silent.append(_who(self._entry(rank), rank))
        return silent

    def _counts(self) -> dict[int, int]:
        with self._lock:
            return {r: self.store.add(self.key("alive", r), 0) for r in range(self.world)
                    if r != self.rank}

    def _entry(self, rank: int) -> dict[str, Any] | None:
        try:
            with self._lock:  # (a get of a missing key would block, holding the lock)
                key = self.key("shape", rank)
                return json.loads(self.store.get(key).decode()) if self.store.check([key]) \
                    else None
        except Exception:  # noqa: BLE001 - the name is a courtesy
            return None

    def roll_call(self, beats: float = 3.0) -> list[str]:
        """The machines that stopped beating (by name), waiting ``beats`` intervals for
        those not yet known silent that long (:meth:`silent`, asked twice)."""
        after = beats * self.interval
        lost = self.silent(after)  # also notes the counts it had not heard yet
        if lost:
            return lost
        time.sleep(after)
        return self.silent(after)


def lost_machines_note() -> str | None:
    """After a worker failure: which machines were lost, if any (None: all answered, or a
    single-machine launch)."""
    beat = active()
    if beat is None:
        return None
    lost = beat.roll_call()
    if not lost:
        return None
    verb, pronoun = ("was", "it") if len(lost) == 1 else ("were", "they")
    return (f"{' and '.join(lost)} {verb} lost ({pronoun} stopped answering); what follows on "
            "this machine is a consequence (see that machine's output, if it has any).")


def silent_machines() -> list[str]:
    """The machines of this process's launch that stopped beating (see
    :meth:`Heartbeat.silent`); [] without a heartbeat (one machine, or c10d)."""
    beat = active()
    return beat.silent() if beat is not None else []

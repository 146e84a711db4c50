"""The hang watchdog of `accel launch`: find the rank a stuck job waits for, say where it is.

A rank that blocks (a deadlock, a rank-0-only branch that skips a collective, a stuck
read) leaves its peers waiting in a collective until torch's timeout, 30 minutes by default
if one is set at all. Each worker counts its steps in a shared-memory beacon
(:mod:`accel_state.progress`: ``Accelerator.backward`` adds 1 on entry, no syscall); a
thread of the launcher reads the beacons every few seconds. When no local rank has made a
step for the stall limit, counted from the first step so start-up, data loading and the
first compile never count, it makes every rank write its Python stack (SIGUSR1 ->
faulthandler), names the rank that stopped first — the fewest steps; among equals the one
not waiting inside ``torch.distributed``, then the one idle longest — and ends the job.

Start-up has a limit of its own (``--startup_timeout``, default 1800 s): counted from the
launch (the rendezvous, ``init_process_group``, the first collective, loading, the first
compile), it ends a job whose ranks never make their first step — a peer machine that died
while the job was starting leaves the others blocked there.

The same beacons name that rank when torch's collective timeout ends the job first: the
rank that times out is a waiter, not the one that hung (:meth:`Watchdog.failure_note`).
Single-process launches have no peer to wait for and run without a watchdog.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accel_state.errors import ConfigurationError
from accel_state.progress import RankProgress, read_progress

__all__ = ["DEFAULT_STALL_TIMEOUT", "DEFAULT_STARTUP_TIMEOUT", "STALL_EXIT_CODE", "Stack",
           "Watchdog", "parse_stack", "parse_stall_timeout", "pick_laggard", "quiet_torch_logs"]

DEFAULT_STALL_TIMEOUT = 1800.0
"""Seconds without a step before the job counts as hung: 30 minutes outlasts a long
evaluation or checkpoint save between two steps; set it lower when steps are regular."""

DEFAULT_STARTUP_TIMEOUT = 1800.0
"""Seconds from the launch to the first step before the job counts as stuck starting."""

STALL_EXIT_CODE = 124
"""Exit code of a launch the watchdog ended (``timeout(1)``'s), distinct from a crash."""

_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_WAITING = ("/torch/distributed/", "\\torch\\distributed\\")


def parse_stall_timeout(value: object, source: str = "--stall_timeout") -> float | None:
    """Seconds (> 0), or None for ``off``; anything else is an error naming ``source`` (a
    flag; an environment variable when upper-case; else a config-file key and its file) and
    the fix. ``false`` means off too: YAML reads an unquoted ``off`` as false."""
    text = str(value).strip().lower()
    if text in ("off", "false"):
        return None
    if source.startswith("-"):
        shown, example = f"{source} {value!r}", f"{source} 600"
    elif source.isupper():
        shown, example = f"{source}={value!r}", f"{source}=600"
    else:  # "stall_timeout in FILE"
        key, _, where = source.partition(" ")
        shown, example = f"{key}: {value!r} ({where})", f"{key}: 600"
    fix = f"give a positive number of seconds (e.g. {example}), or off to disable the watchdog."
    try:
        seconds = float(text)
    except ValueError:
        raise ConfigurationError(f"{shown} is invalid: {fix}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(
            f"{shown} is invalid: a stall limit must be more than 0 seconds; {fix}")
    return seconds


@dataclass(frozen=True)
class Stack:
    """A faulthandler dump of one rank."""

    text: str
    main: tuple[tuple[str, int, str], ...]
    """(file, line, function) of the main thread, innermost first (faulthandler lists the
    threads newest first, so the main thread comes last)."""

    @property
    def where(self) -> str | None:
        return f"{self.main[0][0]}:{self.main[0][1]} in {self.main[0][2]}" if self.main else None

    @property
    def waiting(self) -> bool:
        """Whether the main thread is inside torch.distributed (a collective, a barrier)."""
        return any(any(w in file for w in _WAITING) for file, _, _ in self.main)


def parse_stack(text: str) -> Stack:
    blocks: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        match = _FRAME.match(line)
        if match:
            if not blocks:
                blocks.append([])
            blocks[-1].append((match["file"], int(match["line"]), match["func"]))
        elif line.strip() and not line[0].isspace():
            blocks.append([])  # "Thread 0x... (most recent call first):"
    return Stack(text, tuple(blocks[-1]) if blocks else ())


@dataclass(frozen=True)
class _Seen:
    progress: RankProgress
    changed_at: float


def pick_laggard(seen: Mapping[int, _Seen], stacks: Mapping[int, Stack] | None = None,
                 ) -> int | None:
    """The rank that stopped first: fewest steps, then not waiting in torch.distributed,
    then idle longest, then the lowest rank."""
    stacks = stacks or {}

    def key(rank: int) -> tuple[int, bool, float, int]:
        stack = stacks.get(rank)
        return (seen[rank].progress.steps, stack is not None and stack.waiting,
                seen[rank].changed_at, rank)

    return min(seen, key=key) if seen else None


def _who(p: RankProgress) -> str:
    return f"rank {p.rank} (local rank {p.local_rank}, pid {p.pid or '?'})"


def _steps(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


class Watchdog:
    """Reads the beacons in ``folder``; with a ``stall_timeout``, ends a job that stalls.

    ``expected`` local workers and ``machines`` only shape the message. Use as a context
    manager around the agent's run; :attr:`summary` is set once it has fired. With a
    ``startup_timeout`` it also ends a job with no first step that long after entering.
    """

    def __init__(self, folder: str, stall_timeout: float | None, *, expected: int = 0,
                 machines: int = 1, clock: Callable[[], float] = time.monotonic,
                 poll: float | None = None, dump_wait: float = 3.0, grace: float = 3.0,
                 out: Any = None, startup_timeout: float | None = None,
                 lost_machines: Callable[[], list[str]] | None = None) -> None:
        self.folder, self.stall_timeout = folder, stall_timeout
        self.lost_machines = lost_machines
        """Names the machines that are gone (accel_launch.heartbeat): the job ends at once."""
        self.lost: list[str] = []
        self.startup_timeout = startup_timeout
        self._armed_at: float | None = None  # the launch, or a restart: start-up begins
        self.starting = False
        """Whether it fired because no first step came (rather than a stall)."""
        self.expected, self.machines = expected, machines
        self._clock, self._dump_wait, self._grace = clock, dump_wait, grace
        base = stall_timeout if stall_timeout is not None else 100.0
        self._poll = poll if poll is not None else min(max(base / 20, 0.1), 5.0)
        self._out = out
        self._seen: dict[int, _Seen] = {}
        self._last_step: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.summary: str | None = None
        """The closing line once the watchdog ended the job (None until then)."""

    # -- observing --------------------------------------------------------------------------
    def observe(self) -> None:
        """Read every beacon; remember when each rank's count last changed."""
        now = self._clock()
        for rank, p in read_progress(self.folder).items():
            old = self._seen.get(rank)
            if old is not None and (old.progress.steps, old.progress.pid) == (p.steps, p.pid):
                continue
            self._seen[rank] = _Seen(p, now)
            if old is not None and old.progress.pid != p.pid and p.steps == 0:
                self._last_step = None  # a restarted worker: start-up again, not a stall
                self._armed_at = now
            elif p.steps > 0:
                self._last_step = now

    def laggard(self, stacks: Mapping[int, Stack] | None = None) -> int | None:
        """The rank that stopped first among those seen (see :func:`pick_laggard`)."""
        return pick_laggard(self._seen, stacks)

    def stalled(self) -> bool:
        """Steps have started and none has happened on any rank for the stall limit."""
        return (self.stall_timeout is not None and self._last_step is not None
                and self._clock() - self._last_step >= self.stall_timeout)

    def stuck_starting(self) -> bool:
        """No step yet, ``startup_timeout`` after the launch (or the last restart)."""
        return (self.startup_timeout is not None and self._last_step is None
                and self._armed_at is not None
                and self._clock() - self._armed_at >= self.startup_timeout)

    # -- the thread ---------------------------------------------------------------------------
    def __enter__(self) -> Watchdog:
        self._armed_at = self._clock()
        self._thread = threading.Thread(target=self._run, name="accel-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            self.observe()
            self.lost = self.lost_machines() if self.lost_machines is not None else []
            if self.lost:  # the ranks wait for one that will never come: no stacks needed
                self.summary = self.lost_summary()
                quiet_torch_logs()
                self._end_job()
                return
            if self.stalled() or self.stuck_starting():
                self.starting = not self.stalled()
                self.fire()
                return

    def fire(self) -> None:
        """Dump every rank's stack, print them, set :attr:`summary`, end the job."""
        stacks = self.collect_stacks()
        laggard = self.laggard(stacks)
        print(self.stacks_report(stacks, laggard), file=self._out or sys.stderr, flush=True)
        self.summary = self.stall_summary(stacks, laggard)
        quiet_torch_logs()  # the agent's "death signal" lines would bury the summary
        self._end_job()

    def collect_stacks(self) -> dict[int, Stack]:
        """SIGUSR1 to every rank that can dump its stack; the dumps, once complete."""
        sizes: dict[int, int] = {}
        for rank, seen in self._seen.items():
            if seen.progress.pid:
                with contextlib.suppress(OSError):
                    os.kill(seen.progress.pid, signal.SIGUSR1)
                    sizes[rank] = -1
        deadline = self._clock() + self._dump_wait
        texts: dict[int, str] = {}
        while sizes and self._clock() < deadline:
            time.sleep(0.1)
            for rank in list(sizes):
                text = _read(self._seen[rank].progress.stack_path)
                if text and len(text) == sizes[rank]:
                    texts[rank] = text  # the same size twice 0.1 s apart: written
                    del sizes[rank]
                else:
                    sizes[rank] = len(text)
        return {rank: parse_stack(text) for rank, text in texts.items()}

    def _end_job(self) -> None:
        """SIGTERM to our main thread (the agent stops the workers and no restart follows),
        then SIGKILL to any worker still alive after ``grace`` (one stuck in C++ code that
        handles SIGTERM in Python never gets to act on it)."""
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
        deadline = self._clock() + self._grace
        pids = [s.progress.pid for s in self._seen.values()
                if s.progress.pid not in (0, os.getpid())]
        while pids and self._clock() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    # -- messages -----------------------------------------------------------------------------
    def stacks_report(self, stacks: Mapping[int, Stack], laggard: int | None) -> str:
        order = sorted(self._seen, key=lambda r: (r != laggard, r))
        lines = [f"accel launch: {self._what()}: the Python stacks of this machine's ranks "
                 "follow, the rank that stopped first first."]
        for rank in order:
            p = self._seen[rank].progress
            role = "stopped first" if rank == laggard else (
                "waiting in torch.distributed" if rank in stacks and stacks[rank].waiting
                else "")
            lines.append(f"--- {_who(p)}: {_steps(p.steps)}{'; ' + role if role else ''} ---")
            lines.append(stacks[rank].text.rstrip() if rank in stacks else
                         "(no stack: the worker handles SIGUSR1 itself, or it has exited)")
        return "\n".join(lines)

    def _what(self) -> str:
        if self.starting:
            return (f"no rank made its first step within {self.startup_timeout:g} s of the "
                    "launch (--startup_timeout)")
        return f"no rank made a step for {self.stall_timeout:g} s (--stall_timeout)"

    def stall_summary(self, stacks: Mapping[int, Stack], laggard: int | None) -> str:
        if self.starting:
            tail = (f"{self._what()[0].upper()}{self._what()[1:]}; the workers were stopped "
                    f"(exit code {STALL_EXIT_CODE}).")
        else:
            tail = (f"No rank made a step for {self.stall_timeout:g} s (--stall_timeout / "
                    f"ACCEL_STALL_TIMEOUT); the workers were stopped (exit code "
                    f"{STALL_EXIT_CODE}).")
        if laggard is None:
            if self.starting:
                return f"the job did not start. {tail}{self._scope_note()}"
            return f"the job hung. {tail}"
        p = self._seen[laggard].progress
        most = max(s.progress.steps for s in self._seen.values())
        others = f" (the others reached {most})" if most > p.steps else ""
        stack = stacks.get(laggard)
        where = f", at {stack.where}" if stack is not None and stack.where else ""
        if self.starting:
            text = (f"the job did not start: {_who(p)} stopped first{where}; the other ranks "
                    f"were waiting for it. {tail}")
        else:
            text = (f"the job hung: {_who(p)} stopped first, after {_steps(p.steps)}{others}"
                    f"{where}; the other ranks were waiting for it. {tail}")
        return text + self._scope_note()

    def lost_summary(self) -> str:
        verb, phase = "was" if len(self.lost) == 1 else "were", (
            "before the first step" if self._last_step is None else "while the job ran")
        return (f"{' and '.join(self.lost)} {verb} lost {phase} (no heartbeat, or its "
                "connection closed): this machine's workers were waiting for it and were "
                f"stopped (exit code {STALL_EXIT_CODE}).")

    def _scope_note(self) -> str:
        notes = []
        if self.expected > len(self._seen):
            notes.append(f" {self.expected - len(self._seen)} of the {self.expected} workers "
                         "of this machine never created an Accelerator; one of them may be "
                         "the one stuck.")
        if self.machines > 1:
            notes.append(" Only this machine's ranks were watched: the rank the others wait "
                         "for may be on another machine (see its launcher's output).")
        return "".join(notes)

    def failure_note(self, first: int) -> str | None:
        """After a worker failure: the rank that stopped first, when it is not ``first``
        (the rank that failed first, often a waiter whose collective timed out)."""
        self.observe()
        laggard = self.laggard()
        if laggard is None or laggard == first or first not in self._seen:
            return None
        lag, failed = self._seen[laggard], self._seen[first].progress
        if lag.progress.steps >= failed.steps:
            return None
        idle = self._clock() - lag.changed_at
        return (f"Rank {laggard} (local rank {lag.progress.local_rank}) had stopped first: "
                f"{_steps(lag.progress.steps)}, the last about {idle:.0f} s before the "
                f"failure, while rank {first} made {failed.steps}; if rank {first} failed in a "
                f"collective that timed out, rank {laggard} is the rank that hung and rank "
                f"{first} only waited for it (rank {laggard}'s output stops where it hung)."
                + self._scope_note())


_TORCH_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher",
                  "torch.distributed.run")


def quiet_torch_logs() -> None:
    """Only errors from torch's agent. Its loggers each carry their own level (from
    ``$LOGLEVEL``), so a parent's level alone would not do: set every one that exists."""
    names = [n for n in list(logging.root.manager.loggerDict)
             if n.startswith(_TORCH_LOGGERS)]
    for name in {*names, *_TORCH_LOGGERS}:
        logging.getLogger(name).setLevel(logging.ERROR)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

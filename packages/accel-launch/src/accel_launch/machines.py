"""The machines of a launch meet and agree before any worker starts.

Over the rendezvous store every launcher publishes the job's shape as it understood it
(:func:`job_shape`: machines, processes, mixed precision, strategy, a digest of the config
file) and who it is (machine rank, host, address). Machine 0 compares each shape with its
own as it arrives and publishes one verdict; every launcher ends with that verdict, so a
mismatch stops every machine with the same message, naming the field, both values and the
machines. A machine rank claimed twice, a machine that never joins and machine 0 going
away are named the same way, and while machines are missing each launcher prints where it
waits, at an interval (:class:`Progress`), instead of nothing.

The store is a ``torch.distributed.Store``; nothing here starts a process. Key layout under
``prefix``: ``claim/R`` (static rendezvous only), ``shape/R``, ``verdict``, ``ack/R``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["OK", "MachinesError", "Progress", "compare_shapes", "config_digest", "job_shape",
           "meet"]

OK = "ok"
_ACK_WAIT = 5.0
_POLL = 0.2


class MachinesError(RuntimeError):
    """The machines cannot start together; the message says which and why."""


def config_digest(raw: Mapping[str, Any] | None) -> str:
    """A short digest of a config file's content, ``machine_rank`` left out (it differs on
    every machine by design); ``none`` without a config file."""
    if raw is None:
        return "none"
    shared = {k: v for k, v in raw.items() if k != "machine_rank"}
    text = json.dumps(shared, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def job_shape(*, num_machines: int | tuple[int, int], per_machine: int,
              mixed_precision: str | None, strategy: str, config: str) -> dict[str, str]:
    """The fields every machine must agree on, as text. ``num_machines``: a count, or the
    (MIN, MAX) range of an elastic job (compared as ``MIN:MAX``: the machines that are
    there vary, the range every launcher was given must not)."""
    low, high = num_machines if isinstance(num_machines, tuple) else (num_machines,) * 2

    def counted(per: int) -> str:
        return str(low * per) if low == high else f"{low * per}:{high * per}"

    return {"num_machines": counted(1), "processes_per_machine": str(per_machine),
            "num_processes": counted(per_machine),
            "mixed_precision": mixed_precision or "no", "strategy": strategy,
            "config_file_digest": config}


def _who(entry: Mapping[str, Any]) -> str:
    where = ", ".join(x for x in (entry.get("host"), entry.get("address")) if x)
    return f"machine rank {entry['rank']}" + (f" ({where})" if where else "")


def compare_shapes(entries: Mapping[int, Mapping[str, Any]]) -> str | None:
    """The disagreements of the shapes in ``entries`` (by index) with the lowest index's,
    as one message, or None when they agree."""
    if not entries:
        return None
    first = min(entries)
    ref = entries[first]
    problems = []
    for index in sorted(entries):
        entry = entries[index]
        for field, value in entry["shape"].items():
            if ref["shape"].get(field) != value:
                problems.append(f"{field}: {_who(ref)} has {ref['shape'].get(field)}, "
                                f"{_who(entry)} has {value}")
    if not problems:
        return None
    return ("the machines disagree on " + "; ".join(problems) + ". Start every machine with "
            "the same flags and the same config file (only --machine_rank differs).")


@dataclass
class Progress:
    """Prints ``waiting for machines J/N at ENDPOINT (T s of LIMIT s)`` every ``every`` s."""

    endpoint: str
    limit: float
    every: float
    out: Any = None
    started: float = 0.0
    _next: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.started or time.monotonic()
        self._next = self.started + self.every

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.limit - self.elapsed()

    def tick(self, joined: int | None, total: int, detail: str = "") -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        count = f" {joined}/{total}" if joined is not None else ""
        tail = f"; {detail}" if detail else ""
        print(f"accel launch: waiting for machines{count} at {self.endpoint} "
              f"({self.elapsed():.0f} s of {self.limit:.0f} s){tail}",
              file=self.out or sys.stderr, flush=True)


def progress_interval(limit: float) -> float:
    """A tenth of the limit, between 5 and 30 s."""
    return min(30.0, max(5.0, limit / 10))


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


class _Meeting:
    def __init__(self, store: Any, prefix: str, index: int, world: int, me: dict[str, Any],
                 progress: Progress, lost: Callable[[Exception], MachinesError]) -> None:
        self.store, self.prefix, self.index, self.world = store, prefix, index, world
        self.me, self.progress, self.lost = me, progress, lost

    def key(self, *parts: object) -> str:
        return "/".join([self.prefix, *map(str, parts)])

    def call(self, op: str, *args: Any) -> Any:
        try:
            return getattr(self.store, op)(*args)
        except Exception as exc:  # noqa: BLE001 - every store failure here is a lost peer
            raise self.lost(exc) from exc

    def present(self) -> dict[int, dict[str, Any]]:
        found = {}
        for index in range(self.world):
            key = self.key("shape", index)
            if self.call("check", [key]):
                found[index] = json.loads(_text(self.call("get", key)))
        return found

    def claim(self) -> None:
        token = json.dumps(self.me, sort_keys=True)
        held = _text(self.call("compare_set", self.key("claim", self.index), "", token))
        if held != token:
            other = json.loads(held)
            raise MachinesError(
                f"machine rank {self.index} is taken: {_who(other)}, pid {other.get('pid')}, "
                f"joined as --machine_rank {self.index} first (this is {_who(self.me)}). Give "
                f"every machine its own --machine_rank, 0 to {self.world - 1}.")

    def decide(self) -> str:
        """Machine 0: wait for every shape (or a mismatch, or the limit); the verdict."""
        while True:
            found = self.present()
            mismatch = compare_shapes(found)
            if mismatch:
                return mismatch
            missing = [i for i in range(self.world) if i not in found]
            if not missing:
                return OK
            if self.progress.left() <= 0:
                names = ", ".join(map(str, missing))
                joined = ", ".join(map(str, sorted(found))) or "none"
                ranks = "rank" if len(missing) == 1 else "ranks"
                return (f"machine {ranks} {names} never joined within "
                        f"{self.progress.limit:.0f} s (--rdzv_timeout); joined: {joined}. "
                        f"Start {'it' if len(missing) == 1 else 'them'} with the same "
                        f"--num_machines, --main_process_ip and --main_process_port, and check "
                        f"that {self.progress.endpoint} is reachable from there.")
            self.progress.tick(len(found), self.world,
                               "not yet: machine rank " + ", ".join(map(str, missing)))
            time.sleep(_POLL)

    def await_verdict(self) -> str:
        """Any other machine: wait for machine 0's verdict."""
        key = self.key("verdict")
        while not self.call("check", [key]):
            if self.progress.left() <= -_ACK_WAIT * 4:
                raise MachinesError(
                    f"machine 0 at {self.progress.endpoint} gave no answer within "
                    f"{self.progress.limit:.0f} s (--rdzv_timeout): see its output.")
            joined = sum(self.call("check", [self.key("shape", i)]) for i in range(self.world))
            self.progress.tick(joined, self.world)
            time.sleep(_POLL)
        return _text(self.call("get", key))

    def wait_for_acks(self, seen: list[int]) -> None:
        deadline = time.monotonic() + _ACK_WAIT
        keys = [self.key("ack", i) for i in seen if i != self.index]
        while keys and time.monotonic() < deadline:
            keys = [k for k in keys if not self.call("check", [k])]
            time.sleep(_POLL)


def meet(store: Any, *, prefix: str, index: int, world: int, me: dict[str, Any],
         progress: Progress, claim: bool,
         lost: Callable[[Exception], MachinesError]) -> dict[int, dict[str, Any]]:
    """Publish ``me`` (with its ``shape``) as machine ``index`` of ``world`` and return what
    every machine published (by index) once all shapes are equal; raise
    :class:`MachinesError` otherwise.
    ``claim``: refuse a second machine with the same index (the static rendezvous, where
    the index is the user's --machine_rank)."""
    meeting = _Meeting(store, prefix, index, world, me, progress, lost)
    if claim:
        meeting.claim()
    meeting.call("set", meeting.key("shape", index), json.dumps(me, sort_keys=True))
    if index == 0:
        verdict = meeting.decide()
        meeting.call("set", meeting.key("verdict"), verdict)
        if verdict != OK:
            meeting.wait_for_acks(sorted(meeting.present()))
    else:
        verdict = meeting.await_verdict()
        if verdict != OK:
            meeting.call("set", meeting.key("ack", index), "1")
    if verdict != OK:
        raise MachinesError(verdict)
    return meeting.present()

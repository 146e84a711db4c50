"""Elastic membership: a job that runs on any number of machines between MIN and MAX.

``--min_machines`` / ``--max_machines`` become the elastic agent's ``min_nodes`` /
``max_nodes`` (torchrun's ``--nnodes MIN:MAX``). Only torch's c10d rendezvous can re-form
a job with fewer machines, so a range switches the default static backend to c10d and is
refused with a static backend the user chose. After a lost machine the agents of the others
restart their workers (``--max_restarts``), torch's rendezvous gathers whoever is left, and
the job goes on when at least MIN machines are there; the workers resume from their last
checkpoint at the new world size.

Each agent counts its own restarts, and one restarted because another machine rejoined
(a membership change) does not count it, so ``TORCHELASTIC_RESTART_COUNT`` could differ
between machines of the same attempt. :class:`agreeing_agent` makes the machines agree: each
publishes its count in the meeting after the rendezvous and every agent takes the highest.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["agreeing_agent", "check_machine_range", "machine_range", "membership_note",
           "new_agreement", "resolve_machine_range", "store_lost_note", "too_few_note"]


def machine_range(args: argparse.Namespace) -> tuple[int, int]:
    """``(MIN, MAX)`` machines of the launch (both ``--num_machines`` when not given)."""
    low = getattr(args, "min_machines", None)
    high = getattr(args, "max_machines", None)
    return (int(low if low is not None else args.num_machines),
            int(high if high is not None else args.num_machines))


def resolve_machine_range(args: argparse.Namespace, sources: dict[str, str]) -> None:
    """Fill the range after the sources are read: ``--num_machines`` left at its default
    becomes MAX; a range switches a default static rendezvous to c10d (and says so in
    ``sources``, which ``--dry_run`` prints)."""
    low, high = getattr(args, "min_machines", None), getattr(args, "max_machines", None)
    if low is None and high is None:
        return
    if sources.get("num_machines") == "default" and high is not None:
        args.num_machines = int(high)
        sources["num_machines"] = "--max_machines"
    low, high = machine_range(args)
    if low < high and args.rdzv_backend == "static" and sources.get("rdzv_backend") == "default":
        args.rdzv_backend = "c10d"
        sources["rdzv_backend"] += " (static -> c10d: a machine range needs a re-rendezvous)"


def check_machine_range(args: argparse.Namespace) -> None:
    """Refuse a range torch's agent cannot run, naming the value and the fix."""
    low, high = machine_range(args)
    if low < 1:
        raise ConfigurationError(
            f"--min_machines {low} is invalid: a job needs at least 1 machine; use "
            "--min_machines 1 or more.")
    if low > high:
        raise ConfigurationError(
            f"--min_machines {low} is more than --max_machines {high}: give MIN <= MAX "
            f"(e.g. --min_machines {high} --max_machines {low}).")
    if not low <= args.num_machines <= high:
        raise ConfigurationError(
            f"--num_machines {args.num_machines} is outside --min_machines {low} .. "
            f"--max_machines {high}: it says how many machines --num_processes counts; give "
            f"a number in the range, or leave it out (then it is --max_machines).")
    if low < high and args.rdzv_backend == "static":
        raise ConfigurationError(
            f"--min_machines {low} / --max_machines {high} need the c10d rendezvous, which "
            "can re-form the job with another number of machines: pass --rdzv_backend c10d "
            "(or leave --rdzv_backend out), or give one number of machines.")


class _Agreement:
    """What an agent and its rendezvous handler tell each other about restarts."""

    def __init__(self) -> None:
        self.mine = 0
        self.agreed: int | None = None


@contextlib.contextmanager
def agreeing_agent() -> Iterator[None]:
    """While open, torch's launcher builds agents whose restart count is the highest of
    the machines' after every rendezvous (the handler publishes and reads them: it
    finds the agreement as ``restart_agreement`` on itself)."""
    from torch.distributed.launcher import api

    base = api.LocalElasticAgent

    class AgreeingAgent(base):  # type: ignore[misc, valid-type]
        def _rendezvous(self, worker_group: Any) -> None:
            spec = worker_group.spec
            agreement = getattr(spec.rdzv_handler, "restart_agreement", None)
            if agreement is not None:
                agreement.mine = spec.max_restarts - self._remaining_restarts
                agreement.agreed = None
            super()._rendezvous(worker_group)
            if agreement is not None and agreement.agreed is not None \
                    and agreement.agreed > agreement.mine:
                self._remaining_restarts = max(0, spec.max_restarts - agreement.agreed)

    api.LocalElasticAgent = AgreeingAgent
    try:
        yield
    finally:
        api.LocalElasticAgent = base


def new_agreement() -> _Agreement:
    """A fresh agreement for one rendezvous handler."""
    return _Agreement()


def membership_note(rounds: int, restarts: int, machines: int, low: int, high: int,
                    per_machine: int) -> str | None:
    """The line a launcher prints after a c10d rendezvous that is worth a word: a job
    formed again after a restart, or an elastic job that starts short of MAX."""
    processes = machines * per_machine
    if rounds:
        return (f"the machines met again (restart {restarts}): {machines} machine(s) within "
                f"--min_machines {low} .. --max_machines {high}, {processes} process(es) in "
                "all; the workers start again from the beginning of the script (load_state() "
                "resumes them from the last checkpoint).")
    if machines < high:
        return (f"the job starts with {machines} of up to {high} machines (--min_machines "
                f"{low}); a machine that joins later restarts the workers with it.")
    return None


def too_few_note(low: int, timeout: float) -> str:
    """Why a launcher whose job lost machines stops: too few came back to go on."""
    return (f"fewer than --min_machines {low} machines met again within {timeout:.0f} s "
            "(--rdzv_timeout) after the workers stopped: the job cannot go on. Its checkpoints "
            f"are kept: start at least {low} machines again to resume from the last one.")


def store_lost_note(endpoint: str) -> str:
    """Why a launcher whose job lost the machine hosting the rendezvous stops."""
    return (f"the rendezvous at {endpoint} is gone (the machine hosting it was lost: machine "
            "0, unless --rdzv_endpoint names another host), so the machines left cannot meet "
            "again. The job's checkpoints are kept: start the machines again to resume from "
            "the last one; to outlive machine 0, give --rdzv_endpoint a host that is not a "
            "training machine.")

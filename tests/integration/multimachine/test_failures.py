"""Machines that disagree, cannot reach machine 0, never join or share a rank are named, on
every machine, within a minute; each case prints how long each machine took to exit."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from accel_launch.heartbeat import LOST_AFTER

pytestmark = pytest.mark.multiprocess

SCRIPT = str(Path(__file__).parent / "scripts" / "machines_train.py")
MAIN = "10.77.0.1"  # machine 0's address (conftest.ADDRESSES)
WRONG = "10.77.0.9"  # on the machines' network, but no machine has it
RDZV = 12  # --rdzv_timeout of the unreachable and never-joining cases (s)


def _flags(port: int, rank: int, **over: str) -> list[str]:
    """A 2-machine launch, one CPU process per machine unless ``over`` says otherwise."""
    values = {"num_machines": "2", "main_process_ip": MAIN,
              "main_process_port": str(port), "machine_rank": str(rank), **over}
    return ["--cpu", *(x for k, v in values.items() for x in (f"--{k}", v))]


def _finish_all(launched, limit: float) -> list[float]:
    for one in launched:
        one.finish(timeout=limit + 30)
    return [one.ended - one.started for one in launched]


@pytest.mark.parametrize(("field", "first", "second", "values"), [
    ("num_machines", {}, {"num_machines": "3"}, ("2", "3")),
    ("processes_per_machine", {"num_processes": "2"}, {"num_processes": "4"}, ("1", "2")),
    ("mixed_precision", {}, {"mixed_precision": "bf16"}, ("no", "bf16")),
    ("processes_per_machine", {"num_processes": "2", "rdzv_backend": "c10d"},
     {"num_processes": "4", "rdzv_backend": "c10d"}, ("1", "2")),
])
def test_machines_that_disagree_are_both_refused_naming_the_field(
        machines, tmp_path: Path, field: str, first: dict[str, str], second: dict[str, str],
        values) -> None:
    port = machines.new_port()
    pair = machines.pair([[*_flags(port, 0, **first), SCRIPT, "once", str(tmp_path)],
                          [*_flags(port, 1, **second), SCRIPT, "once", str(tmp_path)]])
    took = _finish_all(pair, 60)
    for one in pair:
        assert one.returncode == 1, one.explain()
        line = [x for x in one.stderr.splitlines() if "disagree" in x]
        assert line, one.explain()
        assert re.search(rf"{field}: machine rank 0 \([^)]*\) has {values[0]}, "
                         rf"machine rank 1 \([^)]*\) has {values[1]}", line[0]), line[0]
    assert not list(tmp_path.glob("rank-*")), "a worker started despite the mismatch"
    assert max(took) < 60
    print(f"{field} mismatch: machines exited after {took[0]:.1f} s and {took[1]:.1f} s")


def _note_exits(launched) -> None:
    """Note when each of ``launched`` exited (they end while the others still run)."""
    for one in launched:
        if one.ended is None and one.popen.poll() is not None:
            one.ended = time.monotonic()
    time.sleep(0.1)


@pytest.fixture(scope="module")
def waits(_namespaces, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The three cases that end at a time limit, started together (each on a port and in a
    folder of its own) so that their waits overlap; each test below reads its own. A machine
    lost during start-up: both launchers, machine 1's killed once its worker runs. An
    unreachable machine 0: machine 1 alone, pointed at an address nobody has. A machine that
    never joins: machine 0 alone. What they started is killed afterwards."""
    machines = _namespaces
    folders = {name: tmp_path_factory.mktemp(name) for name in ("lost", "unreachable", "alone")}
    port = machines.new_port()
    lost = [machines.launch(rank, *_flags(port, rank), SCRIPT, "late", str(folders["lost"]))
            for rank in (0, 1)]  # default settings: --startup_timeout is 30 minutes
    unreachable = machines.launch(1, *_flags(machines.new_port(), 1, main_process_ip=WRONG,
                                             rdzv_timeout=str(RDZV)),
                                  SCRIPT, "once", str(folders["unreachable"]))
    alone_port = machines.new_port()
    alone = machines.launch(0, *_flags(alone_port, 0, rdzv_timeout=str(RDZV)), SCRIPT, "once",
                            str(folders["alone"]))
    watched = [lost[0], unreachable, alone]
    try:
        deadline = time.monotonic() + 120
        while not (folders["lost"] / "rank-1.pid").exists():
            assert time.monotonic() < deadline and lost[0].popen.poll() is None, \
                lost[0].finish(5).explain()
            _note_exits(watched)
        killed = time.monotonic()
        lost[1].popen.kill()  # machine 1 dies while machine 0 waits in init_process_group
        deadline = killed + LOST_AFTER + 30
        while time.monotonic() < deadline and any(o.popen.poll() is None for o in watched):
            _note_exits(watched)
        yield SimpleNamespace(lost=lost[0].finish(5), killed=killed,
                              unreachable=unreachable.finish(5), alone=alone.finish(5),
                              alone_port=alone_port)
    finally:
        machines.kill_all()


def test_an_unreachable_main_process_ip_is_named(waits) -> None:
    one = waits.unreachable
    took = one.ended - one.started
    assert one.returncode == 1, one.explain()
    assert f"cannot reach machine 0 at {WRONG}:" in one.stderr, one.explain()
    assert f"within {RDZV} s" in one.stderr
    assert one.stderr.count("\n") < 15, "retries must print one line per interval\n" + \
        one.explain()
    assert RDZV <= took < RDZV + 18
    print(f"unreachable address: named after {took:.1f} s (limit {RDZV} s)")


def test_a_machine_that_never_joins_is_named_with_progress_meanwhile(waits) -> None:
    one, port = waits.alone, waits.alone_port
    took = one.ended - one.started
    assert one.returncode == 1, one.explain()
    assert (f"waiting for machines 1/2 at {MAIN}:{port} (5 s of {RDZV} s); not yet: "
            "machine rank 1") in one.stderr, one.explain()
    assert (f"machine rank 1 never joined within {RDZV} s (--rdzv_timeout); joined: 0."
            in one.stderr), one.explain()
    assert RDZV <= took < RDZV + 18
    print(f"never joined: named after {took:.1f} s (limit {RDZV} s)")


def test_a_machine_lost_during_start_up_is_named_within_a_minute(waits) -> None:
    """Machine 0 waits in init_process_group for machine 1, which is gone: its heartbeat
    stopped, and machine 0 ends the job naming it, long before --startup_timeout."""
    survivor = waits.lost
    assert survivor.returncode == 124, survivor.explain()
    error = [line for line in survivor.stderr.splitlines() if "error:" in line][-1]
    assert re.fullmatch(
        r"accel launch: error: machine rank 1 \([^)]*10\.77\.0\.2\) was lost before the first "
        r"step \(no heartbeat, or its connection closed\): this machine's workers were waiting "
        r"for it and were stopped \(exit code 124\)\.", error), error
    took = survivor.ended - waits.killed
    assert LOST_AFTER <= took < 60, took
    print(f"lost during start-up: machine 0 named it {took:.1f} s after the kill "
          f"(heartbeat limit {LOST_AFTER:g} s, --startup_timeout left at its 1800 s)")

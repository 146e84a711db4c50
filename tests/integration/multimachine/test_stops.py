"""No worker outlives its launcher: stop signals and SIGKILL, on one machine and on two."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = str(Path(__file__).parent / "scripts" / "machines_train.py")


def _wait_for(path_glob: tuple[Path, str], count: int, launched, timeout: float = 120) -> None:
    folder, pattern = path_glob
    deadline = time.monotonic() + timeout
    while len(list(folder.glob(pattern))) < count:
        for one in launched:
            if one.popen.poll() is not None:
                one.finish(5)
                pytest.fail("a launcher ended before its workers were ready\n" + one.explain())
        assert time.monotonic() < deadline, "the workers did not start in time"
        time.sleep(0.2)


def _namespace_empties(machines, machine: int, within: float) -> float:
    """Seconds until no process is left in that namespace (fails after ``within``)."""
    start = time.monotonic()
    while machines.pids(machine):
        assert time.monotonic() - start < within, (
            f"processes still alive in machine {machine} after {within} s: "
            f"{machines.pids(machine)}")
        time.sleep(0.2)
    return time.monotonic() - start


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL"])
def test_a_stopped_launcher_leaves_no_worker(machines, tmp_path: Path, sig) -> None:
    launched = machines.launch(0, "--cpu", "--num_processes", "2", "--main_process_port",
                               str(machines.new_port()), SCRIPT, "hold", str(tmp_path))
    _wait_for((tmp_path, "rank-*.pid"), 2, [launched])
    launched.popen.send_signal(sig)
    took = _namespace_empties(machines, 0, within=15)
    launched.finish(15)
    expected = -signal.SIGKILL if sig == signal.SIGKILL else 128 + sig
    assert launched.returncode == expected, launched.explain()
    print(f"{sig.name}: every process gone after {took:.1f} s")


def test_a_launcher_blocked_in_the_exit_barrier_obeys_sigterm(
        machines, two_machine_flags, tmp_path: Path) -> None:
    pair = machines.pair([[*flags, "--rdzv_timeout", "50", SCRIPT, "uneven", str(tmp_path)]
                          for flags in two_machine_flags])  # progress lines every 5 s
    _wait_for((tmp_path, "rank-*.pid"), 2, pair)
    deadline = time.monotonic() + 60
    while "waiting for the other machines to finish" not in (
            line := pair[0].popen.stderr.readline()):  # rank 0 has returned: the barrier
        assert line and time.monotonic() < deadline, "no progress line in the exit barrier"
    assert "workers have finished" in line and "s of torch's 300 s exit barrier)" in line
    sent = time.monotonic()
    pair[0].popen.send_signal(signal.SIGTERM)
    pair[0].finish(30)
    took = pair[0].ended - sent
    assert pair[0].returncode == 128 + signal.SIGTERM, pair[0].explain()
    assert took < 10, f"machine 0 took {took:.1f} s to obey SIGTERM\n" + pair[0].explain()
    print(f"exit barrier: SIGTERM obeyed in {took:.1f} s")


@pytest.mark.parametrize("killed", [1, 0], ids=["machine1", "machine0"])
def test_the_other_machine_names_a_machine_whose_launcher_was_killed(
        machines, two_machine_flags, tmp_path: Path, killed: int) -> None:
    pair = machines.pair([[*flags, SCRIPT, "hold", str(tmp_path)]
                          for flags in two_machine_flags])
    _wait_for((tmp_path, "rank-*.pid"), 2, pair)
    sent = time.monotonic()
    pair[killed].popen.send_signal(signal.SIGKILL)
    gone = _namespace_empties(machines, killed, within=15)
    survivor = pair[1 - killed].finish(60)
    took = survivor.ended - sent
    assert survivor.returncode != 0, survivor.explain()
    error = [line for line in survivor.stderr.splitlines() if "error:" in line]
    assert error and f"machine rank {killed} " in error[-1] and " was lost" in error[-1], \
        survivor.explain()
    assert took < 60
    print(f"machine {killed} killed: its processes gone after {gone:.1f} s, machine "
          f"{1 - killed} named it and exited after {took:.1f} s")


def test_a_launcher_waiting_for_the_other_machines_obeys_sigterm(machines, two_machine_flags,
                                                                  tmp_path: Path) -> None:
    launched = machines.launch(0, *two_machine_flags[0], "--rdzv_timeout", "50", SCRIPT, "once",
                               str(tmp_path))  # a progress line every 5 s
    deadline = time.monotonic() + 60
    while "waiting for machines 1/2" not in (line := launched.popen.stderr.readline()):
        assert line and time.monotonic() < deadline, "no progress line while waiting"
    sent = time.monotonic()
    launched.popen.send_signal(signal.SIGTERM)
    launched.finish(30)
    took = launched.ended - sent
    assert launched.returncode == -signal.SIGTERM, launched.explain()
    assert took < 3 and not machines.pids(0)
    print(f"waiting for machines: SIGTERM obeyed in {took:.1f} s")

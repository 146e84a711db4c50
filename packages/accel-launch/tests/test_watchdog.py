"""The hang watchdog, in-process: the stall limit's sources and errors, the rule that picks
the rank that stopped first, the messages, and a real stack dump of this very process.
The end-to-end run (two gloo workers, one hangs) is tests/integration/test_launch_watchdog.py."""

from __future__ import annotations

import os
import re
import signal
import struct
import time
from pathlib import Path

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan, validate_launch_args
from accel_launch.watchdog import (
    DEFAULT_STALL_TIMEOUT,
    Watchdog,
    parse_stack,
    parse_stall_timeout,
)
from accel_state import progress
from accel_state.errors import ConfigurationError

CPU_BOX = HostInfo(cpu_count=8, python="/py")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _beacon(folder: Path, rank: int, steps: int, pid: int = 0, local: int | None = None) -> None:
    local = rank if local is None else local
    (folder / f"rank-{rank}.progress").write_bytes(struct.pack("=4Q", steps, pid, rank, local))


# -- the stall limit: flag, environment, default, bad values ------------------------------------
@pytest.mark.parametrize("text, seconds", [("5", 5.0), ("0.5", 0.5), ("off", None),
                                           (" OFF ", None), ("1800", 1800.0)])
def test_stall_limit_values(text: str, seconds: float | None) -> None:
    assert parse_stall_timeout(text) == seconds


@pytest.mark.parametrize("text", ["0", "-3", "nan", "inf", "soon", ""])
def test_a_bad_stall_limit_names_the_value_and_the_fix(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"--stall_timeout '.*' is invalid.*"
                       r"positive number of seconds \(e\.g\. --stall_timeout 600\), or off"):
        parse_stall_timeout(text)
    with pytest.raises(ConfigurationError, match=r"ACCEL_STALL_TIMEOUT='.*' is invalid.*"
                       r"ACCEL_STALL_TIMEOUT=600"):
        parse_stall_timeout(text, "ACCEL_STALL_TIMEOUT")


def test_non_positive_limit_is_refused_before_anything_starts() -> None:
    args = launch_command_parser().parse_args(["--stall_timeout", "0", "t.py"])
    with pytest.raises(ConfigurationError, match="more than 0 seconds"):
        validate_launch_args(args)


def _plan(*argv: str, host: HostInfo = CPU_BOX):
    return build_launch_plan(launch_command_parser().parse_args([*argv, "t.py"]), host, 1)


def test_the_watchdog_runs_only_with_more_than_one_process() -> None:
    one = _plan("--cpu")
    assert (one.watch, one.stall_timeout) == (False, None)
    two = _plan("--cpu", "--num_processes", "2")
    assert (two.watch, two.stall_timeout) == (True, DEFAULT_STALL_TIMEOUT)
    assert DEFAULT_STALL_TIMEOUT == 1800


def test_flag_beats_environment_beats_default() -> None:
    env_box = HostInfo(cpu_count=8, python="/py", stall_timeout="60")
    assert _plan("--cpu", "--num_processes", "2", host=env_box).stall_timeout == 60
    assert _plan("--cpu", "--num_processes", "2", "--stall_timeout", "7",
                 host=env_box).stall_timeout == 7
    off_box = HostInfo(cpu_count=8, python="/py", stall_timeout="off")
    plan = _plan("--cpu", "--num_processes", "2", host=off_box)
    assert (plan.watch, plan.stall_timeout) == (True, None)  # watches, never ends the job
    bad_box = HostInfo(cpu_count=8, python="/py", stall_timeout="-1")
    with pytest.raises(ConfigurationError, match="ACCEL_STALL_TIMEOUT='-1'"):
        _plan("--cpu", host=bad_box)  # checked even where it is not used


def test_config_file_key_between_flag_and_environment(tmp_path: Path) -> None:
    env_box = HostInfo(cpu_count=8, python="/py", stall_timeout="60")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\nstall_timeout: 300\n")
    two = ("--cpu", "--num_processes", "2", "--config_file", str(cfg))
    assert _plan(*two, host=env_box).stall_timeout == 300  # the file beats the variable
    assert _plan(*two, "--stall_timeout", "7", host=env_box).stall_timeout == 7
    cfg.write_text("stall_timeout: off\n")  # YAML reads an unquoted off as false
    plan = _plan(*two, host=env_box)
    assert (plan.watch, plan.stall_timeout) == (True, None)
    cfg.write_text("stall_timeout: -5\n")
    with pytest.raises(ConfigurationError, match=r"stall_timeout: '-5' \(in config file "
                       rf"{re.escape(str(cfg))}\) is invalid.*e\.g\. stall_timeout: 600"):
        _plan(*two, host=env_box)


# -- when it fires ------------------------------------------------------------------------------
def test_the_clock_starts_at_the_first_step(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog(str(tmp_path), 5, clock=clock)
    _beacon(tmp_path, 0, 0)
    _beacon(tmp_path, 1, 0)
    dog.observe()
    clock.now += 3600  # start-up, data loading, the first compile: never a stall
    dog.observe()
    assert not dog.stalled()
    _beacon(tmp_path, 0, 1)
    dog.observe()
    clock.now += 4.9
    dog.observe()
    assert not dog.stalled()
    _beacon(tmp_path, 1, 1)  # any rank's step restarts the clock
    dog.observe()
    clock.now += 4.9
    assert not dog.stalled()
    clock.now += 0.2
    assert dog.stalled()


def test_a_restarted_worker_group_starts_up_again_without_a_stall(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog(str(tmp_path), 5, clock=clock)
    _beacon(tmp_path, 0, 4, pid=10)
    dog.observe()
    _beacon(tmp_path, 0, 0, pid=11)  # the next attempt's worker
    dog.observe()
    clock.now += 60  # it loads its checkpoint
    assert not dog.stalled()


def test_off_only_watches(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog(str(tmp_path), None, clock=clock)
    _beacon(tmp_path, 0, 1)
    dog.observe()
    clock.now += 10**6
    assert not dog.stalled()


# -- who stopped first --------------------------------------------------------------------------
_IN_COLLECTIVE = """\
Current thread 0x0000 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce
  File "/work/train.py", line 30 in main
"""
_ELSEWHERE = """\
Thread 0x0001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x0000 (most recent call first):
  File "/work/train.py", line 12 in load
  File "/work/train.py", line 28 in main
"""


def test_parse_stack_reads_the_main_thread() -> None:
    stack = parse_stack(_ELSEWHERE)
    assert stack.where == "/work/train.py:12 in load"
    assert not stack.waiting
    assert parse_stack(_IN_COLLECTIVE).waiting
    assert parse_stack("").where is None


def test_fewest_steps_stopped_first(tmp_path: Path) -> None:
    _beacon(tmp_path, 0, 9)
    _beacon(tmp_path, 1, 8)
    _beacon(tmp_path, 2, 9)
    dog = Watchdog(str(tmp_path), 5, clock=Clock())
    dog.observe()
    assert dog.laggard() == 1


def test_among_equals_the_rank_not_waiting_in_a_collective(tmp_path: Path) -> None:
    for rank in range(3):
        _beacon(tmp_path, rank, 4)
    dog = Watchdog(str(tmp_path), 5, clock=Clock())
    dog.observe()
    stacks = {0: parse_stack(_IN_COLLECTIVE), 1: parse_stack(_IN_COLLECTIVE),
              2: parse_stack(_ELSEWHERE)}
    assert dog.laggard(stacks) == 2
    assert dog.laggard() == 0  # without stacks: the lowest rank


def test_among_equals_the_rank_idle_longest(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog(str(tmp_path), 5, clock=clock)
    _beacon(tmp_path, 0, 3)
    dog.observe()
    clock.now += 1
    _beacon(tmp_path, 1, 3)
    dog.observe()
    clock.now += 1
    _beacon(tmp_path, 0, 4)
    _beacon(tmp_path, 1, 4)
    _beacon(tmp_path, 2, 4)
    dog.observe()
    assert dog.laggard() == 0


# -- the messages -------------------------------------------------------------------------------
def test_stall_summary_names_the_rank_where_and_the_others(tmp_path: Path) -> None:
    _beacon(tmp_path, 0, 3, pid=41)
    _beacon(tmp_path, 1, 2, pid=42)
    dog = Watchdog(str(tmp_path), 5, clock=Clock(), expected=3, machines=2)
    dog.observe()
    stacks = {1: parse_stack(_ELSEWHERE), 0: parse_stack(_IN_COLLECTIVE)}
    text = dog.stall_summary(stacks, dog.laggard(stacks))
    assert text.startswith("the job hung: rank 1 (local rank 1, pid 42) stopped first, after "
                           "2 steps (the others reached 3), at /work/train.py:12 in load")
    assert "No rank made a step for 5 s" in text and "exit code 124" in text
    assert "1 of the 3 workers of this machine never created an Accelerator" in text
    assert "may be on another machine" in text
    report = dog.stacks_report(stacks, 1)
    assert report.index("--- rank 1") < report.index("--- rank 0")
    assert "rank 0 (local rank 0, pid 41): 3 steps; waiting in torch.distributed" in report


def test_after_a_collective_timeout_the_rank_that_hung_is_named(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog(str(tmp_path), None, clock=clock)
    _beacon(tmp_path, 0, 2)
    _beacon(tmp_path, 1, 2)
    dog.observe()
    _beacon(tmp_path, 0, 3)  # rank 0 enters step 3's all-reduce, rank 1 never arrives
    dog.observe()
    clock.now += 20  # ... until rank 0's collective times out and it exits
    note = dog.failure_note(first=0)
    assert note is not None and note.startswith(
        "Rank 1 (local rank 1) had stopped first: 2 steps, the last about 20 s before the "
        "failure, while rank 0 made 3; if rank 0 failed in a collective that timed out, "
        "rank 1 is the rank that hung")
    assert dog.failure_note(first=1) is None  # the first to fail is the one behind
    assert dog.failure_note(first=7) is None  # a rank without a beacon


def test_no_note_when_nobody_lagged(tmp_path: Path) -> None:
    _beacon(tmp_path, 0, 5)
    _beacon(tmp_path, 1, 5)
    assert Watchdog(str(tmp_path), None, clock=Clock()).failure_note(first=1) is None


# -- firing, against this very process ----------------------------------------------------------
def test_fire_dumps_real_stacks_and_stops_the_launcher(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """This process plays one worker (its beacon, its faulthandler) and the launcher's main
    thread (it receives the SIGTERM that makes torch's agent stop the workers)."""
    monkeypatch.setenv("ACCEL_WATCHDOG_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    progress.detach()
    terms: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda sig, frame: terms.append(sig))
    skew = [0.0]
    out = tmp_path / "report.txt"
    try:
        progress.attach()[0] += 1
        _beacon(tmp_path, 0, 2, pid=0)  # a peer that cannot dump (it handles SIGUSR1)
        with out.open("w") as sink:
            dog = Watchdog(str(tmp_path), 5, clock=lambda: time.monotonic() + skew[0],
                           grace=0.2, out=sink)
            dog.observe()
            skew[0] = 6.0  # six seconds without a step
            assert dog.stalled()
            dog.fire()
        deadline = time.monotonic() + 5
        while not terms and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress.detach()
    assert terms == [signal.SIGTERM]  # and this process was not SIGKILLed as a "survivor"
    report = out.read_text()
    assert f"--- rank 1 (local rank 1, pid {os.getpid()}): 1 step; stopped first ---" in report
    assert "in collect_stacks" in report and "in test_fire_dumps_real_stacks" in report
    assert "(no stack: the worker handles SIGUSR1 itself, or it has exited)" in report
    assert dog.summary is not None and "rank 1 (local rank 1" in dog.summary


def test_quiet_reaches_loggers_that_carry_their_own_level() -> None:
    import logging

    from accel_launch.watchdog import quiet_torch_logs

    child = logging.getLogger("torch.distributed.elastic.multiprocessing.fake_for_test")
    child.setLevel(logging.WARNING)  # what torch's get_logger() does for each module
    try:
        quiet_torch_logs()
        assert not child.isEnabledFor(logging.WARNING)
    finally:
        child.setLevel(logging.NOTSET)

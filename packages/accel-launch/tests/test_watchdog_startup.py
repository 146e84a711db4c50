"""The watchdog's start-up limit (--startup_timeout / startup_timeout:): armed at the launch,
it ends a job whose ranks never make a first step; a restart re-arms it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan
from accel_launch.watchdog import DEFAULT_STARTUP_TIMEOUT, Watchdog
from accel_state.errors import ConfigurationError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _beacon(folder: Path, rank: int, steps: int, pid: int = 0) -> None:
    (folder / f"rank-{rank}.progress").write_bytes(struct.pack("=4Q", steps, pid, rank, rank))


def _armed(folder: Path, clock: Clock, **kw) -> Watchdog:
    dog = Watchdog(str(folder), 5, clock=clock, poll=3600, startup_timeout=60, **kw)
    dog.__enter__()  # arms it (its thread polls once an hour: the test drives it)
    return dog


def test_no_first_step_within_the_startup_limit_is_stuck(tmp_path: Path) -> None:
    clock = Clock()
    dog = _armed(tmp_path, clock, expected=2)
    try:
        clock.now += 59
        dog.observe()
        assert not dog.stuck_starting()
        clock.now += 1
        assert dog.stuck_starting() and not dog.stalled()
        dog.starting = True
        summary = dog.stall_summary({}, None)
        assert summary.startswith("the job did not start. No rank made its first step within "
                                  "60 s of the launch (--startup_timeout); the workers were "
                                  "stopped (exit code 124).")
        assert "2 of the 2 workers of this machine never created an Accelerator" in summary
    finally:
        dog.__exit__(None, None, None)


def test_a_first_step_disarms_it_and_a_restart_arms_it_again(tmp_path: Path) -> None:
    clock = Clock()
    dog = _armed(tmp_path, clock)
    try:
        _beacon(tmp_path, 0, 1, pid=10)
        dog.observe()
        clock.now += 3.0
        _beacon(tmp_path, 0, 2, pid=10)
        dog.observe()
        clock.now += 3600
        assert not dog.stuck_starting() and dog.stalled()  # the stall limit's business now
        _beacon(tmp_path, 0, 0, pid=11)  # the restarted worker group
        dog.observe()
        clock.now += 59
        assert not dog.stuck_starting() and not dog.stalled()
        clock.now += 1
        assert dog.stuck_starting()
    finally:
        dog.__exit__(None, None, None)


def _plan(*argv: str, config: Path | None = None):
    extra = ["--config_file", str(config)] if config else []
    args = launch_command_parser().parse_args([*extra, *argv])
    return build_launch_plan(args, HostInfo(cpu_count=4, python="/py"), 1)


def test_the_limit_comes_from_the_flag_the_config_file_or_the_default(tmp_path: Path) -> None:
    two = ("--cpu", "--num_processes", "2")
    assert _plan(*two, "t.py").startup_timeout == DEFAULT_STARTUP_TIMEOUT == 1800
    assert _plan(*two, "--startup_timeout", "90", "t.py").startup_timeout == 90
    assert _plan(*two, "--startup_timeout", "off", "t.py").startup_timeout is None
    assert _plan("--cpu", "t.py").startup_timeout is None  # one process: no watchdog
    cfg = tmp_path / "c.yaml"
    cfg.write_text("startup_timeout: 120\n")
    assert _plan(*two, "t.py", config=cfg).startup_timeout == 120
    cfg.write_text("startup_timeout: soon\n")
    with pytest.raises(ConfigurationError, match=r"startup_timeout: 'soon' \(in config file"):
        _plan(*two, "t.py", config=cfg)
    with pytest.raises(ConfigurationError, match="--startup_timeout '-1' is invalid"):
        _plan(*two, "--startup_timeout", "-1", "t.py")

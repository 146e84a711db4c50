"""Mixed precision in 2 real processes with the environment `accel launch --mixed_precision
fp16` gives its workers (gloo, CPU)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


def _worker_env(*flags: str) -> dict[str, str]:
    """What `accel launch FLAGS` adds to its workers' environment (the launcher's own plan,
    as its --dry_run lists it): the script runs in the 2-process launch shared with other
    check scripts (conftest's shared_launch), with this environment."""
    from accel_launch.launch import launch_command_parser
    from accel_launch.launch_plan import HostInfo, build_launch_plan

    args = launch_command_parser().parse_args([*flags, "script.py"])
    return dict(build_launch_plan(args, HostInfo(cpu_count=2), 0).env)


FP16_FROM_THE_LAUNCHER = _worker_env("--cpu", "--num_processes", "2", "--mixed_precision",
                                     "fp16")


@pytest.mark.shared_launch("precision_checks.py", env=FP16_FROM_THE_LAUNCHER)
def test_fp16_from_the_launcher_under_ddp(shared_launch):
    proc = shared_launch
    explain = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, explain
    assert "CHECKS-OK rank=0" in proc.stdout and "CHECKS-OK rank=1" in proc.stdout, explain

"""Mixed precision in 2 real processes through `accel launch --mixed_precision` (gloo, CPU)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


def test_fp16_from_the_launcher_under_ddp(launch, scripts):
    proc = launch("--cpu", "--num_processes", "2", "--mixed_precision", "fp16",
                  str(scripts / "precision_checks.py"))
    explain = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, explain
    assert "CHECKS-OK rank=0" in proc.stdout and "CHECKS-OK rank=1" in proc.stdout, explain

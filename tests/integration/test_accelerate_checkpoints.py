"""Checkpoints written by Hugging Face Accelerate load with accel's load_state, in the 2
processes that wrote them (tests/fixtures/accelerate_checkpoints, made by accelerate 1.15)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


def test_accelerate_checkpoints_restore_everything_on_each_rank(explain, launch, scripts):
    proc = launch("--cpu", "--num_processes", "2",
                  str(scripts / "accelerate_checkpoint_load.py"))
    assert proc.returncode == 0, explain(proc)
    for kind in ("safetensors", "bin"):
        assert proc.stdout.count(f"ok {kind}\n") == 2, explain(proc)
    assert "written by Hugging Face Accelerate" in proc.stderr, explain(proc)

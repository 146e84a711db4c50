"""Checkpoints written by Hugging Face Accelerate load with accel's load_state, in the 2
processes that wrote them (tests/fixtures/accelerate_checkpoints, made by accelerate 1.15)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("accelerate_checkpoint_load.py")
def test_accelerate_checkpoints_restore_everything_on_each_rank(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for kind in ("safetensors", "bin"):
        assert proc.stdout.count(f"ok {kind}\n") == 2, explain(proc)
    assert "written by Hugging Face Accelerate" in proc.stderr, explain(proc)

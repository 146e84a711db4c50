"""prepare_pippy with 2 real processes (gloo) through `accel launch`: equal to one process."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("pipeline_inference.py", "{out}")
def test_prepare_pippy_two_processes_equal_single_process(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    assert "EXPLICIT-LAST-OK rank=1" in out and "EXPLICIT-LAST-OK rank=0" not in out, explain(proc)
    for rank in (0, 1):
        assert f"AUTO-GATHERED-OK rank={rank}" in out, explain(proc)
        assert f"BAD-SPLIT-OK rank={rank}" in out, explain(proc)
        assert f"PIPPY-OK rank={rank}" in out, explain(proc)

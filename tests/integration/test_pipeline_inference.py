"""prepare_pippy with 2 real processes (gloo) through `accel launch`: equal to one process."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


def test_prepare_pippy_two_processes_equal_single_process(explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "pipeline_inference.py"),
                  str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    assert "EXPLICIT-LAST-OK rank=1" in out and "EXPLICIT-LAST-OK rank=0" not in out, explain(proc)
    for rank in (0, 1):
        assert f"AUTO-GATHERED-OK rank={rank}" in out, explain(proc)
        assert f"BAD-SPLIT-OK rank={rank}" in out, explain(proc)
        assert f"PIPPY-OK rank={rank}" in out, explain(proc)

"""The Accelerator's cross-rank methods with 2 real processes (one launch checks them all):
check_trigger on every rank, trigger_sync_in_backward, one Chrome trace per rank from
profile(), the device-map refusal and the topology properties."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.multiprocess

CHECKS = ("check_trigger", "trigger_sync_in_backward", "profile", "device_map refusal",
          "topology")


@pytest.mark.shared_launch("facade_methods.py", "{out}")
def test_facade_methods_across_two_processes(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for check in CHECKS:
        assert proc.stdout.count(f"ok {check}\n") == 2, explain(proc)  # both ranks
    # a real Chrome trace per rank, each with the operators that ran and their shapes
    for rank in (0, 1):
        trace = json.loads((tmp_path / "traces" / f"profile_{rank}.json").read_text())
        ops = [event for event in trace["traceEvents"] if event.get("name") == "aten::addmm"]
        assert ops, f"rank {rank}'s trace has no aten::addmm"
        assert any("Input Dims" in event.get("args", {}) for event in ops)
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == [
        "profile_0.json", "profile_1.json"]

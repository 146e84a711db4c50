"""Real 2-process runs through `accel launch --cpu` (gloo). Few launches, many checks each
(DDP with accumulation against one process: test_ddp_extras.py, in its launch)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess



def test_state_helpers_and_collectives_in_two_processes(explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "state_checks.py"), str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    assert "CHECKS-OK rank=0" in out and "CHECKS-OK rank=1" in out, explain(proc)
    assert out.count("PRINT-ONCE") == 1, explain(proc)
    assert out.count("LOG-MAIN-ONLY") == 1, explain(proc)
    assert out.index("LOG-IN-ORDER rank=0") < out.index("LOG-IN-ORDER rank=1"), explain(proc)
    assert "TIMEOUT-APPLIED" in out, explain(proc)


@pytest.mark.shared_launch("examples/quickstart.py")
def test_quickstart_trains_in_two_processes(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("epoch ")]
    assert len(losses) == 5, explain(proc)  # printed once, by the main process only
    assert losses[-1] < losses[0] * 0.7, losses
    assert "parameters identical on all 2 processes: True" in proc.stdout, explain(proc)

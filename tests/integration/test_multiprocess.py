"""Real 2-process runs through `accel launch --cpu` (gloo). Few launches, many checks each."""

from __future__ import annotations

import pytest
import torch

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


def test_quickstart_trains_in_two_processes(explain, launch, repo):
    proc = launch("--num_processes", "2", "--cpu", str(repo / "examples" / "quickstart.py"))
    assert proc.returncode == 0, explain(proc)
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("epoch ")]
    assert len(losses) == 5, explain(proc)  # printed once, by the main process only
    assert losses[-1] < losses[0] * 0.7, losses
    assert "parameters identical on all 2 processes: True" in proc.stdout, explain(proc)


def test_ddp_with_accumulation_matches_single_process_big_batch(explain, launch, run_here, scripts,
                                                                 tmp_path):
    # 2 processes x batch 4 x 2 accumulated batches == 1 process x batch 16; the 2-process
    # run also compiles the DDP model (Accelerator(dynamo_backend="eager"))
    two = launch("--cpu", "--num_processes", "2", str(scripts / "ddp_equivalence.py"),
                 str(tmp_path / "two.pt"), "--batch-size", "4", "--accumulation-steps", "2",
                 "--dynamo-backend", "eager")
    assert two.returncode == 0, explain(two)
    # the 1-process reference runs the same script here, in the test's process: the same
    # Accelerator code path as a 1-process launch, without starting the launcher and a worker
    run_here(scripts / "ddp_equivalence.py", str(tmp_path / "one.pt"), "--batch-size", "16")
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    one = torch.load(tmp_path / "one.pt", weights_only=True)
    assert two["final"].keys() == one["final"].keys()
    for name, initial in one["initial"].items():
        assert not torch.allclose(one["final"][name], initial), f"{name} did not train"
        torch.testing.assert_close(two["final"][name], one["final"][name], rtol=1e-5, atol=1e-6)

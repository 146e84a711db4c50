"""DDP with 2 real processes: LocalSGD averages every N steps and not between,
join_uneven_inputs lets ranks with fewer batches finish, compression hooks train; and DDP
with gradient accumulation (compiled) equals one process with the whole batch. One launch
(ddp_extras.py, which ends with ddp_equivalence.py's 2-process run) for both tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def ddp_launch(launch, scripts, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """ddp_extras.py's checks, then 2 processes x batch 4 x 2 accumulated batches of
    ddp_equivalence.py, the DDP model compiled (Accelerator(dynamo_backend="eager"))."""
    out: Path = tmp_path_factory.mktemp("ddp")
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "ddp_extras.py"),
                  str(out / "two.pt"), "--batch-size", "4", "--accumulation-steps", "2",
                  "--dynamo-backend", "eager")
    return proc, out


def test_local_sgd_join_and_comm_hooks(explain, ddp_launch):
    proc, _ = ddp_launch
    assert proc.returncode == 0, explain(proc)
    for check in ("local_sgd", "join_uneven_inputs", "comm_hook fp16", "comm_hook bf16",
                  "comm_hook power_sgd"):
        assert proc.stdout.count(f"ok {check}\n") == 2, explain(proc)  # both ranks


def test_ddp_with_accumulation_matches_single_process_big_batch(explain, ddp_launch, run_here,
                                                                 scripts):
    # 2 processes x batch 4 x 2 accumulated batches == 1 process x batch 16
    proc, out = ddp_launch
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.count("ok ddp_equivalence saved\n") == 2, explain(proc)
    # the 1-process reference runs the same script here, in the test's process: the same
    # Accelerator code path as a 1-process launch, without starting the launcher and a worker
    run_here(scripts / "ddp_equivalence.py", str(out / "one.pt"), "--batch-size", "16")
    two = torch.load(out / "two.pt", weights_only=True)
    one = torch.load(out / "one.pt", weights_only=True)
    assert two["final"].keys() == one["final"].keys()
    for name, initial in one["initial"].items():
        assert not torch.allclose(one["final"][name], initial), f"{name} did not train"
        torch.testing.assert_close(two["final"][name], one["final"][name], rtol=1e-5, atol=1e-6)

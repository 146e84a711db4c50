"""Real launches through torch's elastic agent (each costs seconds: keep them few)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

_WORKER = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCEL_USE_CPU", "ACCEL_LAUNCHED",
            "ACCEL_MIXED_PRECISION", "ACCEL_DEBUG_MODE", "OMP_NUM_THREADS"]
    record = {k: os.environ.get(k) for k in keys}
    record.update(argv=sys.argv[1:], sum=total.item(), dist_rank=dist.get_rank(),
                  dist_world=dist.get_world_size(), backend=dist.get_backend())
    out = os.path.join(os.getcwd(), f"rank{dist.get_rank()}.json")
    with open(out, "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()
""")


def test_cpu_two_processes_gloo_all_reduce_and_args(tmp_path: Path, run_accel) -> None:
    (tmp_path / "script.py").write_text(_WORKER)
    result = run_accel("launch", "--cpu", "--num-processes", "2", "--mixed_precision", "bf16",
                       "--debug", "--num_cpu_threads_per_process", "1", "script.py",
                       "--foo", "bar", "--num_processes", "9", "--cpu", "-m")
    assert result.returncode == 0, result
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, rec in enumerate(records):
        assert rec["RANK"] == str(rank) and rec["LOCAL_RANK"] == str(rank)
        assert rec["WORLD_SIZE"] == "2" and rec["dist_world"] == 2
        assert rec["ACCEL_USE_CPU"] == "true" and rec["ACCEL_LAUNCHED"] == "1"
        assert rec["ACCEL_MIXED_PRECISION"] == "bf16" and rec["ACCEL_DEBUG_MODE"] == "true"
        assert rec["OMP_NUM_THREADS"] == "1"
        assert rec["backend"] == "gloo"
        assert rec["sum"] == 3.0
        assert rec["argv"] == ["--foo", "bar", "--num_processes", "9", "--cpu", "-m"]


def test_module_form_single_process(tmp_path: Path, run_accel) -> None:
    (tmp_path / "my_train_mod.py").write_text(_WORKER)
    result = run_accel("launch", "--cpu", "-q", "--log_dir", str(tmp_path / "logs"), "--tee",
                       "3", "--role", "trainer", "-m", "my_train_mod", "a", "--b")
    assert result.returncode == 0, result
    assert "starting" not in result.stderr  # --quiet
    # --log_dir/--tee: torch's elastic agent wrote the worker's streams to files there
    logs = {p.name for p in (tmp_path / "logs").rglob("*.log")}
    assert {"stdout.log", "stderr.log"} <= logs, logs
    rec = json.loads((tmp_path / "rank0.json").read_text())
    assert rec["WORLD_SIZE"] == "1" and rec["argv"] == ["a", "--b"] and rec["sum"] == 1.0
    assert rec["ACCEL_MIXED_PRECISION"] is None and rec["ACCEL_DEBUG_MODE"] is None


_CRASH = textwrap.dedent("""
    import os, sys, time
    import torch.distributed as dist

    dist.init_process_group("gloo")
    marker = os.path.join(os.getcwd(), "rank0_in_barrier")
    if dist.get_rank() == 1:
        while not os.path.exists(marker):
            time.sleep(0.05)
        time.sleep(0.5)  # rank 0 is now blocked inside the barrier
        with open(os.path.join(os.getcwd(), "crashed_at"), "w") as f:
            f.write(repr(time.time()))
        sys.exit(3)
    open(marker, "w").close()
    dist.barrier()
    time.sleep(600)  # a barrier that returned must not end the test either
""")


def test_crashing_rank_ends_the_launch(tmp_path: Path, run_accel) -> None:
    (tmp_path / "crash.py").write_text(_CRASH)
    # A hang would run into the subprocess timeout (rank 0 would wait forever).
    result = run_accel("launch", "--cpu", "--num_processes", "2", "crash.py", timeout=90)
    ended = time.time()
    assert (tmp_path / "rank0_in_barrier").exists(), result
    assert result.returncode == 3, result
    # Startup time depends on the machine's load; from the crash to the launcher's exit
    # must be quick whatever the load (monitor_interval 0.1 s, SIGTERM to the survivor).
    assert ended - float((tmp_path / "crashed_at").read_text()) < 10, result
    assert result.seconds < 60, result
    assert "rank 1 (local rank 1" in result.stderr and "exited with code 3" in result.stderr


_NCCL_WORKER = textwrap.dedent("""
    import json, os
    import torch
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    total = torch.ones(1, device="cuda")
    dist.all_reduce(total)
    with open(os.path.join(os.getcwd(), f"gpu{dist.get_rank()}.json"), "w") as f:
        json.dump({"world": dist.get_world_size(), "sum": total.item(),
                   "use_cpu": os.environ.get("ACCEL_USE_CPU")}, f)
    dist.destroy_process_group()
""")


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_default_launch_uses_one_process_per_cuda_device(tmp_path: Path, run_accel) -> None:
    import torch

    (tmp_path / "gpu.py").write_text(_NCCL_WORKER)
    result = run_accel("launch", "gpu.py", timeout=300)
    assert result.returncode == 0, result
    count = torch.cuda.device_count()
    for rank in range(count):
        rec = json.loads((tmp_path / f"gpu{rank}.json").read_text())
        assert rec == {"world": count, "sum": float(count), "use_cpu": None}

"""`accel launch` end to end: restarts that resume bit for bit, SIGTERM -> last checkpoint,
two "machines" on loopback (static and c10d rendezvous) and `accel test` on the CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

REPO = Path(__file__).resolve().parents[2]
RESUME = str(Path(__file__).parent / "scripts" / "launch_resume.py")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}


def _final(out: Path) -> dict:
    return json.loads((out / "final.json").read_text())


def test_restart_resumes_from_newest_verified_checkpoint_bit_for_bit(
        tmp_path: Path, launch, explain) -> None:
    # the uninterrupted reference run trains first, in the same launch's first attempt
    crashed = launch("--cpu", "--num_processes", "2", "--max_restarts", "1",
                     "--monitor_interval", "0.2", RESUME, str(tmp_path / "crash"),
                     "--crash", "--reference", str(tmp_path / "ref"))
    assert crashed.returncode == 0, explain(crashed)
    ref, got = _final(tmp_path / "ref"), _final(tmp_path / "crash")
    assert ref["attempt"] == 0 and ref["resumed_from"] is None
    assert got["attempt"] == 1, "the worker group was not restarted"
    assert got["resumed_from"] == 6, "load_state() did not pick the newest checkpoint"
    assert got["steps"] == ref["steps"] == 10
    assert got["params"] == ref["params"]  # float.hex: bit for bit


def test_sigterm_is_forwarded_and_the_last_checkpoint_is_saved(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    env = _clean_env()
    proc = subprocess.Popen([sys.executable, "-m", "accel_launch", "launch", "--cpu",
                             "--num_processes", "2", RESUME, str(out), "--sigterm"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 150
    while not (out / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by signal SIGTERM" in stderr
    final = _final(out)
    assert final["preempted_at"] is not None and 3 <= final["preempted_at"] < 10, final
    manifests = list((out / "checkpoints").glob("checkpoint_*/manifest.json"))
    assert len(manifests) == 1, "exactly one (the last) checkpoint was saved"
    assert json.loads(manifests[0].read_text())["step"] is not None


_TWO_MACHINES = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist
    from accel_state import PartialState
    state = PartialState()
    t = torch.tensor([float(state.process_index + 1)])
    dist.all_reduce(t)
    out = os.path.join(sys.argv[1], f"rank{state.process_index}.json")
    with open(out, "w") as f:
        json.dump({"world": state.num_processes, "sum": t.item(), "node": os.environ["GROUP_RANK"],
                   "local": state.local_process_index}, f)
""")


# static on loopback: test_examples.py's multi-node example (and the namespace tests)
@pytest.mark.parametrize("backend", ["c10d"])
def test_two_machines_on_loopback(tmp_path: Path, backend: str) -> None:
    from accel_launch.elastic import find_free_port

    script = tmp_path / "two.py"
    script.write_text(_TWO_MACHINES)
    port = str(find_free_port())
    env = _clean_env()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "accel_launch", "launch", "--cpu", "--num_machines", "2",
         "--machine_rank", str(rank), "--num_processes", "2", "--main_process_ip", "127.0.0.1",
         "--main_process_port", port, "--rdzv_backend", backend, str(script), str(tmp_path)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)]
    for proc in procs:
        _, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in records] == [2, 2]
    assert [r["sum"] for r in records] == [3.0, 3.0]
    assert sorted(r["node"] for r in records) == ["0", "1"]
    assert [r["local"] for r in records] == [0, 0]


def test_accel_test_passes_on_cpu_in_bf16(tmp_path: Path, explain) -> None:
    """2 real processes under a bf16 config (each other config `accel config` writes runs in
    test_selftest_configs.py): bf16 results are held to bf16's tolerance, not fp32's."""
    config = tmp_path / "cpu.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\n"
                      "num_processes: 2\nuse_cpu: true\nmixed_precision: bf16\n")
    env = _clean_env()
    proc = subprocess.run([sys.executable, "-m", "accel_launch", "test", "--config_file",
                           str(config)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, explain(proc)
    assert "state: 2 process(es), MULTI_CPU" in proc.stdout
    assert "mixed precision bf16" in proc.stdout and "(bf16, atol" in proc.stdout
    assert "Test is a success!" in proc.stdout
    assert "the end-to-end test passed" in proc.stdout
    # the bundled test_script ran all of Accelerate's checks too (its only 2-process launch)
    for line in ("Training yielded the same results on one CPU or distributed setup with "
                 "batch split.", "BF16 training check.", "**Test reinstantiated state**",
                 "Test is a success! You are ready for your distributed training!"):
        assert line in proc.stdout, f"{line!r} not printed\n" + explain(proc)

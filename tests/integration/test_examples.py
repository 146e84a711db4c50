"""Every script in examples/ runs, as its docstring says, and shows what it claims.

Distributed workflows start 2 CPU processes through `accel launch` (the commands in the
examples' docstrings). Most share one launch with other check scripts (conftest's
``shared_launch``: each runs as ``__main__``, with fresh state singletons, and its own
output is read back), checkpointing's uninterrupted run too (its resume runs in new
processes, a launch of its own); deepspeed_zero (DeepSpeed's environment) and multi_node
(two launchers, one per "machine", at the same time) have launches of their own. Single-process examples run
as `python` runs them (``__main__``), in the test's own process (an interpreter that
imports torch less). quickstart.py and fsdp.py are run by test_multiprocess.py and
test_fsdp.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


def _launch(script: str, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accel_launch", "launch", "--cpu",
                           "--num_processes", "2", str(EXAMPLES / script), *args],
                          cwd=REPO, env=env or _env(), capture_output=True, text=True, timeout=240)


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"


def _floats(pattern: str, text: str) -> list[float]:
    return [float(v) for v in re.findall(pattern, text)]


def test_every_example_says_how_to_run_it() -> None:
    for script in sorted(EXAMPLES.glob("*.py")):
        doc = script.read_text().split('"""')[1]
        assert f"examples/{script.name}" in doc, f"{script.name}: its docstring has no command"


def test_mixed_precision_example_computes_in_bf16_and_keeps_fp32_weights(run_here,
                                                                        capsys) -> None:
    run_here(EXAMPLES / "mixed_precision.py")
    out = capsys.readouterr().out
    assert "mixed precision: bf16" in out, out
    assert "dtype inside the forward: torch.bfloat16" in out
    assert "dtype of the output: torch.float32" in out
    assert "dtype of the weights: torch.float32" in out
    losses = _floats(r"loss (\d+\.\d+) \(fp32", out)
    twins = _floats(r"fp32 twin (\d+\.\d+)\)", out)
    assert len(losses) == 3 and losses[-1] < 0.6 * losses[0], out
    assert abs(losses[-1] - twins[-1]) < 0.05 * twins[-1], out  # bf16 trains like fp32


@pytest.mark.shared_launch("examples/gradient_accumulation.py")
def test_gradient_accumulation_example_matches_the_large_batch(shared_launch) -> None:
    proc = shared_launch
    assert proc.returncode == 0, _explain(proc)
    assert "batches per process: 16, optimizer steps: 4" in proc.stdout, _explain(proc)
    assert "same weights as 4 steps on batches of 64: True" in proc.stdout, _explain(proc)


@pytest.mark.shared_launch("examples/checkpointing.py", "--checkpoint-dir", "{out}/ckpt")
def test_checkpointing_example_resumes_bit_for_bit(shared_launch) -> None:
    # the uninterrupted run in the shared launch, the resume in new processes of its own
    full, tmp_path = shared_launch, shared_launch.out
    folder = str(tmp_path / "ckpt")
    assert full.returncode == 0, _explain(full)
    assert f"saved step 6 to {folder}" in full.stdout, _explain(full)
    assert (tmp_path / "ckpt" / "manifest.json").is_file()
    resumed = _launch("checkpointing.py", "--checkpoint-dir", folder, "--resume")
    assert resumed.returncode == 0, _explain(resumed)
    assert "resumed at step 6" in resumed.stdout, _explain(resumed)

    def tail(out: str) -> list[str]:
        return [line for line in out.splitlines()
                if re.match(r"step (7|8|9|10|11|12) loss|weights digest", line)]

    assert len(tail(full.stdout)) == 7, _explain(full)
    assert tail(resumed.stdout) == tail(full.stdout), (full.stdout, resumed.stdout)
    assert not re.search(r"^step [1-6] ", resumed.stdout, re.M), resumed.stdout


TRACKER = "both" if importlib.util.find_spec("tensorboard") else "jsonl"


@pytest.mark.shared_launch("examples/tracking.py", "--project-dir", "{out}", "--tracker", TRACKER)
def test_tracking_example_writes_one_run_from_two_processes(shared_launch) -> None:
    proc, tmp_path, tracker = shared_launch, shared_launch.out, TRACKER
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout.count("logged 12 steps") == 1, _explain(proc)
    lines = [json.loads(line) for line in (tmp_path / "example.jsonl").read_text().splitlines()]
    assert lines[0] == {"config": {"lr": 0.01, "epochs": 3, "processes": 2}}
    assert [r["step"] for r in lines[1:]] == list(range(1, 13))  # once, not once per process
    losses = [r["train/loss"] for r in lines[1:]]
    assert losses[-1] < losses[0]
    if tracker == "both":
        from accel_tracking.testing import read_tensorboard_scalars

        scalars = read_tensorboard_scalars(tmp_path / "example")
        assert [step for step, _ in scalars["train/loss"]] == list(range(1, 13))
        assert [v for _, v in scalars["train/loss"]] == pytest.approx(losses)


def test_multi_node_example_on_two_local_machines() -> None:
    from accel_launch.elastic import find_free_port

    port = str(find_free_port())
    procs = [subprocess.Popen(
        [sys.executable, "-m", "accel_launch", "launch", "--cpu", "--num_machines", "2",
         "--machine_rank", str(rank), "--num_processes", "2", "--main_process_ip", "127.0.0.1",
         "--main_process_port", port, str(EXAMPLES / "multi_node.py")],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{out}\n{err[-4000:]}"
        outs.append(out)
    # machine 0 runs global process 0, machine 1 process 1; each is its machine's local 0
    assert "process 0 of 2 (local index 0)" in outs[0], outs
    assert "process 1 of 2 (local index 0)" in outs[1], outs
    losses = _floats(r"epoch \d: loss (\d+\.\d+)", outs[0])
    assert len(losses) == 3 and losses[-1] < losses[0], outs[0]
    assert "parameters identical on all 2 processes: True" in outs[0], outs
    # accelerator.print: once per machine (its local main process), as in Accelerate; the
    # printed losses are all-reduced, so both machines print the same ones
    assert _floats(r"epoch \d: loss (\d+\.\d+)", outs[1]) == losses, outs


@pytest.mark.shared_launch("examples/tensor_parallel.py", "--epochs", "3")
def test_tensor_parallel_example_trains_a_split_model(shared_launch) -> None:
    proc = shared_launch
    assert proc.returncode == 0, _explain(proc)
    assert "tp=2" in proc.stdout and "tp rank 0" in proc.stdout, _explain(proc)
    losses = _floats(r"epoch \d loss (\d+\.\d+)", proc.stdout)
    assert len(losses) == 3 and losses[-1] < losses[0], proc.stdout
    assert "full weight of blocks.0.up: (128, 32)" in proc.stdout  # gathered, not a shard


@pytest.mark.shared_launch("examples/sequence_parallel.py", "--epochs", "3")
def test_sequence_parallel_example_trains_on_sequence_shards(shared_launch) -> None:
    proc = shared_launch
    assert proc.returncode == 0, _explain(proc)
    losses = _floats(r"epoch \d loss (\d+\.\d+)", proc.stdout)
    assert len(losses) == 3 and losses[-1] < losses[0], proc.stdout
    # each rank holds half of every 64-token sequence, at its global positions
    assert "sp rank 0: shard of (8, 32) tokens, positions 0..31" in proc.stdout, proc.stdout
    assert "sp rank 1: shard of (8, 32) tokens, positions 32..63" in proc.stdout, proc.stdout


@pytest.mark.shared_launch("examples/pipeline_parallel.py", "--epochs", "3", "--schedule",
                           "interleaved_1f1b")
def test_pipeline_parallel_example_trains_in_stages_and_gathers_the_model(shared_launch
                                                                          ) -> None:
    proc = shared_launch
    assert proc.returncode == 0, _explain(proc)
    losses = _floats(r"epoch \d loss (\d+\.\d+)", proc.stdout)
    assert len(losses) == 3 and losses[-1] < losses[0] / 2, proc.stdout
    # interleaved: 4 stages of one block, stage s on rank s % 2
    assert "rank 0 holds blocks 0, 2" in proc.stdout, proc.stdout
    assert "rank 1 holds blocks 1, 3" in proc.stdout, proc.stdout
    assert "whole model gathered: 29 tensors, head.weight (32, 64)" in proc.stdout, proc.stdout
    # evaluation (model.eval() + no_grad: forward only): the same gathered logits on both
    # ranks, far above chance (1/32) after training
    accuracy = _floats(r"rank \d next-token accuracy (\d+\.\d+)", proc.stdout)
    assert len(accuracy) == 2 and accuracy[0] == accuracy[1] > 0.5, proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                    reason="DeepSpeed is not installed (accel[deepspeed])")
def test_deepspeed_example_trains_saves_and_reloads() -> None:
    # ACCEL_DEEPSPEED_SHM_COMM=0: gloo collectives, no compile of DeepSpeed's shm all-reduce
    proc = _launch("deepspeed_zero.py", "--epochs", "2", env=_env(ACCEL_DEEPSPEED_SHM_COMM="0"))
    assert proc.returncode == 0, _explain(proc)
    assert "'zero_optimization': {'stage': 2}" in proc.stdout, _explain(proc)
    losses = _floats(r"epoch \d: loss (\d+\.\d+)", proc.stdout)
    assert len(losses) == 2 and losses[-1] < losses[0], proc.stdout
    assert "saved and reloaded" in proc.stdout


def test_big_model_inference_example_offloads_and_matches(run_here, capsys) -> None:
    run_here(EXAMPLES / "big_model_inference.py")
    out = capsys.readouterr().out
    assert "outputs equal to the plain model: True" in out, out
    device_map = out.split("device map:", 1)[1].splitlines()[0]
    assert "'disk'" in device_map, out  # a quarter of the model's size: most is offloaded

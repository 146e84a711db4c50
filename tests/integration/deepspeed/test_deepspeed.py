"""DeepSpeed ZeRO through the unchanged facade in 2 processes (gloo): two launches that
check a lot each (scripts/deepspeed_checks.py, which also runs scripts/deepspeed_across.py's
2-process phases; its 1-process phase runs in this process between them), plus a slow one
that compiles cpu_adam."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
ACROSS = SCRIPTS / "deepspeed_across.py"
TRAIN = ("ZERO-STAGES", "ACCUMULATION", "OFFLOAD", "AUTO-CONFIG", "SEED-WORKFLOW", "ZERO3-INIT",
         "SAVE")
RESUME = ("RESUME", "CORRUPT")


def _port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _run(launch, explain, *args: str, timeout: float = 300, killed: bool = False) -> str:
    """``killed``: the launch ends in a save whose rank 1 SIGKILLs itself (then it fails)."""
    proc = launch("--cpu", "--num_processes", "2", "--main_process_port", _port(),
                  str(SCRIPTS / "deepspeed_checks.py"), *args, timeout=timeout)
    if killed:
        assert proc.returncode != 0 and "KILLING 0 rank=1" in proc.stdout, explain(proc,
                                                                                tail=6000)
    else:
        assert proc.returncode == 0, explain(proc, tail=6000)
    return proc.stdout


def _killed_save_left(checkpoints: Path) -> Path:
    """The staging folder of the save killed at the end of the train launch (checkpoint_1:
    never committed), made older than the cleaning's grace period (a restart minutes later)."""
    import time

    from accel_checkpoint.leftovers import GRACE_S

    names = sorted(p.name for p in checkpoints.iterdir())
    assert len(names) == 2 and names[0] == "checkpoint_0", names
    staging = checkpoints / names[1]
    assert staging.name.startswith("checkpoint_1.tmp-"), names
    assert any((staging / "deepspeed").rglob("zero_pp_rank_1_*")), "rank 1 wrote nothing"
    past = time.time() - GRACE_S - 60
    os.utime(staging, (past, past))
    return staging


@pytest.mark.multiprocess
def test_zero_stages_configs_checkpoint_resume(ds_launcher, explain, run_here, tmp_path,
                                               capsys, monkeypatch):
    """ZeRO-1/2/3 fp32/bf16 vs DDP, accumulation 4 vs DDP, offload, "auto" filling, ZeRO-3
    init + save_model + rotation, a save; then a fresh launch resumes (equal to the straight
    run, DeepSpeed's pickles read through an allow-list) and names a flipped byte in a
    shard; `accel merge-weights` turns the checkpoint into the saved weights.
    Across world sizes and layouts, in the same launches and this process between them
    (scripts/deepspeed_across.py): ZeRO-2 fp32, ZeRO-1 bf16 and ZeRO-3 fp32 checkpoints
    saved by 2 engines load into a plain model here and 2 DDP processes (weights, Adam
    moments and step equal to what the engines held; the next step equal to theirs), an
    FSDP2 model here, and 1-process engines (accel repartitions the ZeRO state: equal state
    and counters, the next step equal to the plain model's); the 1-process engines save
    again and 2-process engines load those (the next step equal to DDP's). ZeRO-3 engines
    prepared without an optimizer load the weights (2 -> 1, 1 -> 1, 1 -> 2). A ZeRO-0
    engine refuses, naming why; a flipped byte in a partition is named.
    The train launch ends in a save whose rank 1 is SIGKILLed with its files staged: the
    resume launch's load_state cleans that staging folder and loads the last good checkpoint
    (issue 39.1)."""
    out = _run(ds_launcher, explain, "train", str(tmp_path), killed=True)
    for marker in TRAIN:
        for rank in (0, 1):
            assert f"{marker}-OK rank={rank}" in out, out
    for rank in (0, 1):
        assert f"DS-SAVED rank={rank}" in out, f"across: the 2-process saves on rank {rank}\n{out}"
    capsys.readouterr()
    monkeypatch.setenv("ACCEL_DEEPSPEED_SHM_COMM", "0")  # engines in this process too
    monkeypatch.setenv("LOCAL_RANK", "0")  # DeepSpeed reads it; removed afterwards
    run_here(ACROSS, "one", str(tmp_path / "across"))
    one = capsys.readouterr().out
    for case, fp32 in (("ds", True), ("ds_z1", False), ("ds_z3", True)):
        assert f"DS-INTO-PLAIN {case} state=True" in one, one
        following = "True" if fp32 else "skipped"
        assert (f"DS-2-TO-1 {case} state=True model=True counters=True next={following}"
                in one), one
    assert "DS-EVAL-2-TO-1 equal=True same=True" in one, one  # ZeRO-3 without an optimizer
    assert "DS-ZERO0-REFUSED named=True unchanged=True" in one, one
    assert "DS-CORRUPT-REFUSED named=True" in one, one
    assert "DS-INTO-FSDP sharded=True equal=True" in one, one
    checkpoints = tmp_path / "run" / "checkpoints"
    staging = _killed_save_left(checkpoints)
    out = _run(ds_launcher, explain, "resume", str(tmp_path))
    # its load cleaned the killed save's staging folder and loaded checkpoint_0 (RESUME-OK:
    # equal to the straight run)
    assert not staging.exists() and sorted(os.listdir(checkpoints)) == ["checkpoint_0"]
    for marker in RESUME:
        for rank in (0, 1):
            assert f"{marker}-OK rank={rank}" in out, out
    for rank in (0, 1):
        for case, fp32 in (("ds", True), ("ds_z1", False), ("ds_z3", True)):
            line = (f"DS-INTO-DDP {case} rank={rank} state=True next="
                    f"{'True' if fp32 else 'skipped'} engine=DistributedDataParallel")
            assert line in out, f"across: {case} into DDP on rank {rank}\n{out}"
        for case in ("ds", "ds_z3"):
            line = f"DS-1-TO-2 {case} rank={rank} state=True counters=True next=True"
            assert line in out, f"across: 1-process {case} into 2 engines, rank {rank}\n{out}"
    assert "DS-EVAL-1-TO-2 equal=True" in out, out
    _merge_weights(tmp_path, capsys)


def _merge_weights(tmp_path: Path, capsys) -> None:
    """`accel merge-weights` turns the ZeRO-2 checkpoint into the weights it was saved with
    (DeepSpeed's zero_to_fp32), and only with --trust_pickles."""
    import subprocess
    import sys

    import torch
    from accel_launch.cli import main
    from safetensors.torch import load_file

    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint_0"
    _merge_refuses_unlisted_and_corrupt_files(checkpoint, tmp_path)
    argv = ["merge-weights", str(checkpoint), str(tmp_path / "merged")]
    # the refusal comes before DeepSpeed is imported: the CLI's own main, in this process
    capsys.readouterr()
    code = main(argv)
    refused = capsys.readouterr().err
    assert code != 0 and "--trust_pickles" in refused, refused
    assert not (tmp_path / "merged").exists(), "a refused merge wrote files"
    # the merge itself imports DeepSpeed: in a process of its own, through `python -m`
    merged = subprocess.run([sys.executable, "-m", "accel_launch", *argv, "--trust_pickles"],
                            capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stderr[-4000:]
    got = load_file(str(tmp_path / "merged" / "model.safetensors"))
    want = torch.load(tmp_path / "at_save.pt")
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key


def _merge_refuses_unlisted_and_corrupt_files(checkpoint: Path, tmp_path: Path) -> None:
    """DeepSpeed's zero_to_fp32 reads every file of the folder: a file the manifest does not
    list, or a listed one that changed, is refused before DeepSpeed is imported."""
    import shutil

    from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
    from accel_checkpoint.merge_deepspeed import merge_deepspeed_weights

    stray = tmp_path / "stray"
    shutil.copytree(checkpoint, stray)
    (stray / "deepspeed" / "model" / "extra_states.pt").write_bytes(b"not listed")
    with pytest.raises(CheckpointError, match=r"does not list \(deepspeed/model/extra_states"):
        merge_deepspeed_weights(stray, tmp_path / "out", trust_pickles=True)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(checkpoint, corrupt)
    shard = corrupt / "deepspeed" / "model" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="zero_pp_rank_0_mp_rank_00_optim_states"):
        merge_deepspeed_weights(corrupt, tmp_path / "out", trust_pickles=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_offload_with_deepspeed_cpu_adam(ds_launcher, explain, tmp_path):
    """A torch AdamW with optimizer offload becomes DeepSpeed's CPU Adam (compiled once
    into TORCH_EXTENSIONS_DIR) and trains like DDP."""
    out = _run(ds_launcher, explain, "cpu_adam", str(tmp_path), timeout=1200)
    for rank in (0, 1):
        assert f"CPU-ADAM-OK rank={rank}" in out, out

"""DeepSpeed ZeRO through the unchanged facade in 2 processes (gloo): two launches that
check a lot each (scripts/deepspeed_checks.py, which also runs scripts/deepspeed_across.py's
2-process phases), plus a slow one that compiles cpu_adam."""

from __future__ import annotations

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


def _run(launch, explain, *args: str, timeout: float = 300) -> str:
    proc = launch("--cpu", "--num_processes", "2", "--main_process_port", _port(),
                  str(SCRIPTS / "deepspeed_checks.py"), *args, timeout=timeout)
    assert proc.returncode == 0, explain(proc, tail=6000)
    return proc.stdout


@pytest.mark.multiprocess
def test_zero_stages_configs_checkpoint_resume(ds_launcher, explain, run_here, tmp_path,
                                               capsys):
    """ZeRO-1/2/3 fp32/bf16 vs DDP, accumulation 4 vs DDP, offload, "auto" filling, ZeRO-3
    init + save_model + rotation, a save; then a fresh launch resumes (equal to the straight
    run, DeepSpeed's pickles read through an allow-list) and names a flipped byte in a
    shard; `accel merge-weights` turns the checkpoint into the saved weights.
    Across layouts, in the same launches: a ZeRO-2 checkpoint saved by 2 DeepSpeed
    processes loads into 2 DDP processes (weights equal, the next step equal to the
    DeepSpeed run's) and, in this process, into a plain model and an FSDP2 model."""
    out = _run(ds_launcher, explain, "train", str(tmp_path))
    for marker in TRAIN:
        for rank in (0, 1):
            assert f"{marker}-OK rank={rank}" in out, out
    for rank in (0, 1):
        assert f"DS-SAVED rank={rank}" in out, f"across: ZeRO-2 save on rank {rank}\n{out}"
    out = _run(ds_launcher, explain, "resume", str(tmp_path))
    for marker in RESUME:
        for rank in (0, 1):
            assert f"{marker}-OK rank={rank}" in out, out
    for rank in (0, 1):
        line = f"DS-INTO-DDP rank={rank} equal=True next=True engine=DistributedDataParallel"
        assert line in out, f"across: ZeRO-2 into DDP on rank {rank}\n{out}"
    capsys.readouterr()
    run_here(ACROSS, "plain", str(tmp_path / "across"))
    plain = capsys.readouterr().out
    assert "DS-INTO-PLAIN equal=True state=['exp_avg', 'exp_avg_sq', 'step']" in plain, plain
    assert "DS-INTO-FSDP sharded=True equal=True" in plain, plain
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

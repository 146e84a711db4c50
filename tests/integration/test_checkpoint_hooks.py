"""Save/load state hooks as diffusers' training examples use them (scripts/hooks_pretrained.py):
the hooks get the models Accelerate hands them (the module inside DDP, FSDP2's module, the
DeepSpeed engine), their pops are honoured, a checkpoint saved on the main process only
commits (once without the peer timeout), and a resume continues at the step Accelerate
would, the script skipping the seen batches itself. One process runs in the test's own
interpreter; 2-process runs are two launches per strategy (straight run, resume)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "scripts" / "hooks_pretrained.py"
FIXTURE = REPO / "tests" / "fixtures" / "accelerate_hooks"


def _final(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("final "))


def _launch(flags: list[str], out: Path, *args: str, **env: str
            ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    environ.update(PYTHONUNBUFFERED="1", **env)
    command = [sys.executable, "-m", "accel_launch", "launch", "--cpu", "--num_processes", "2",
               *flags, str(SCRIPT), "--out", str(out), "--steps", "6", *args]
    return subprocess.run(command, cwd=REPO, env=environ, capture_output=True, text=True,
                          timeout=240)


def _straight_then_resume(flags: list[str], tmp_path: Path, explain, **env: str
                          ) -> tuple[str, str]:
    """The uninterrupted run (checkpoints after updates 2, 4, 6), then a fresh launch that
    resumes from a copy of its checkpoint-4; both outputs."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir()
    first = _launch(flags, straight, **env)
    assert first.returncode == 0, explain(first, tail=6000)
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-4", resumed / "checkpoint-4")
    second = _launch(flags, resumed, "--resume", **env)
    assert second.returncode == 0, explain(second, tail=6000)
    assert _final(first.stdout).endswith(" at 6"), first.stdout
    assert _final(second.stdout) == _final(first.stdout), (first.stdout, second.stdout)
    # the resumed run makes updates 5 and 6 only: the script's own skipping, done once
    assert [ln.split()[1] for ln in second.stdout.splitlines() if ln.startswith("update")] \
        == ["5", "6"], second.stdout
    return first.stdout + first.stderr, second.stdout + second.stderr


def test_one_process_hooks_save_pretrained_and_resume_like_accelerate(run_here, tmp_path,
                                                                        capsys):
    """1 process: the hook saves unet/ and pops the weights (no model.safetensors), the
    load hook pops the model; the resume ends where the straight run and Hugging Face
    Accelerate 1.15's straight run end. A checkpoint that Accelerate wrote through the same
    hooks (unet/ only) loads: the load hooks run before the models are counted."""
    straight, resumed, foreign = tmp_path / "straight", tmp_path / "resumed", tmp_path / "hf"
    for folder in (straight, resumed, foreign):
        folder.mkdir()
    run_here(SCRIPT, "--out", str(straight), "--steps", "6")
    out = capsys.readouterr().out
    expected = (FIXTURE / "expected.txt").read_text().splitlines()[1]
    assert _final(out) == expected, out  # Accelerate's own straight run
    assert "saved checkpoint-2 hooks=['TinyUNet']" in out, out
    saved = {p.name for p in (straight / "checkpoint-4").iterdir()}
    assert "unet" in saved and not any(name.startswith("model") for name in saved), saved
    shutil.copytree(straight / "checkpoint-4", resumed / "checkpoint-4")
    run_here(SCRIPT, "--out", str(resumed), "--steps", "6", "--resume")
    out = capsys.readouterr().out
    assert "resumed checkpoint-4 hooks=['TinyUNet']" in out, out
    assert _final(out) == expected, out

    shutil.copytree(FIXTURE / "checkpoint-4", foreign / "checkpoint-4")
    with pytest.warns(UserWarning, match="written by Hugging Face Accelerate"):
        run_here(SCRIPT, "--out", str(foreign), "--steps", "6", "--resume")
    out = capsys.readouterr().out
    assert "resumed checkpoint-4 hooks=['TinyUNet']" in out, out
    assert _final(out) == expected, out


@pytest.mark.multiprocess
def test_two_processes_ddp_hooks_get_the_module_and_main_only_saves_commit(tmp_path,
                                                                          explain):
    """DDP, saves on the main process only (as diffusers' examples): the hooks get the
    module, not the DistributedDataParallel wrapper; the first save commits alone after the
    peer timeout (5 s here), the later ones without waiting; the resume is exact."""
    straight, resumed = _straight_then_resume([], tmp_path, explain,
                                              ACCEL_CHECKPOINT_PEER_TIMEOUT="5")
    assert "saved checkpoint-2 hooks=['TinyUNet']" in straight, straight
    assert "no other rank entered it within 5 s" in straight, straight
    assert "committed on this rank alone without waiting" in straight, straight
    assert "resumed checkpoint-4 hooks=['TinyUNet']" in resumed, resumed
    files = {p.name for p in (tmp_path / "straight" / "checkpoint-4").iterdir()}
    assert "random_states_0.json" in files and "random_states_1.json" not in files, files


@pytest.mark.multiprocess
def test_two_processes_fsdp2_hooks_get_the_sharded_module(tmp_path, explain):
    """FSDP2 (saves on every rank: the layout needs them all): the save hooks get the
    prepared module with weights == [], the load hooks nothing (accel loads the shards)."""
    straight, resumed = _straight_then_resume(["--use_fsdp", "--fsdp_version", "2"],
                                              tmp_path, explain)
    assert "saved checkpoint-2 hooks=['FSDPTinyUNet']" in straight, straight
    assert "resumed checkpoint-4 hooks=[]" in resumed, resumed


@pytest.mark.multiprocess
def test_two_processes_deepspeed_hooks_get_the_engine(tmp_path, explain):
    """DeepSpeed ZeRO-2 (saves on every rank, as diffusers' examples do under DeepSpeed):
    the save hooks get the engine (its save_pretrained answers from the module) and
    weights == [], the load hooks nothing (the engine loads its own checkpoint)."""
    pytest.importorskip("deepspeed")
    straight, resumed = _straight_then_resume(
        ["--use_deepspeed", "--zero_stage", "2"], tmp_path, explain,
        ACCEL_DEEPSPEED_SHM_COMM="0", TORCH_EXTENSIONS_DIR=os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions")))
    assert "saved checkpoint-2 hooks=['DeepSpeedEngine']" in straight, straight
    assert "resumed checkpoint-4 hooks=[]" in resumed, resumed
    assert (tmp_path / "straight" / "checkpoint-4" / "unet").is_dir()

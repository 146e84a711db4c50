"""transformers' Trainer on accel (through the `accelerate` shim): one process with
gradient accumulation, resume_from_checkpoint, and two processes through `accel launch`."""

from __future__ import annotations

import json
from pathlib import Path

import hf_tiny
import pytest
import torch

#: Same batches split differently sum the same gradients up to float rounding (~3e-5
#: measured after 4 Adam steps that move the weights by 2.5e-2).
ATOL = 1e-4


def _train(out: Path, resume: str | None = None, **args):
    from transformers import Trainer

    trainer = Trainer(model=hf_tiny.gpt2(), args=hf_tiny.training_args(str(out), **args),
                      train_dataset=hf_tiny.TokenDataset(32))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """Weights after 4 steps of 8 samples, in one process with no accumulation."""
    from accel_state import GradientState, PartialState

    trainer = _train(tmp_path_factory.mktemp("reference"), per_device_train_batch_size=8)
    weights = hf_tiny.weights(trainer.model)
    PartialState._reset_state()  # module-scoped: leave the singletons as the next test expects
    GradientState._reset_state()
    return weights


def _assert_close(weights: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    assert weights.keys() == reference.keys()
    worst = max((weights[k] - reference[k]).abs().max().item() for k in reference)
    assert worst < ATOL, f"weights differ from the 8-sample reference by {worst}"


def test_trainer_runs_on_accels_accelerator_and_accumulates(tmp_path, reference):
    import accel

    trainer = _train(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert isinstance(trainer.accelerator, accel.Accelerator)
    assert trainer.state.global_step == 4
    _assert_close(hf_tiny.weights(trainer.model), reference)


def test_resume_from_checkpoint_continues_exactly(tmp_path):
    save = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=6,
                save_strategy="steps", save_steps=3)
    full = _train(tmp_path / "full", **save)
    assert (tmp_path / "full" / "checkpoint-3").is_dir()
    resumed = _train(tmp_path / "full", resume=str(tmp_path / "full" / "checkpoint-3"), **save)
    assert resumed.state.global_step == 6
    assert hf_tiny.losses(resumed) == hf_tiny.losses(full)  # steps 4-6 recomputed, bit for bit
    for name, value in hf_tiny.weights(full.model).items():
        assert torch.equal(hf_tiny.weights(resumed.model)[name], value), name


@pytest.mark.multiprocess
def test_two_processes_accumulate_and_resume(tmp_path, launch, scripts, reference):
    from safetensors.torch import load_file

    proc = launch("--cpu", "--num_processes", "2", str(scripts / "trainer_two_processes.py"),
                  str(tmp_path))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("HF2 ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}")
    report = json.loads(lines[0][4:])
    assert report["accelerator"] == "accel.accelerator"
    assert report["num_processes"] == 2 and report["distributed_type"].endswith("MULTI_CPU")
    assert report["batches_per_rank"] == 8  # 32 samples, 2 per batch, half to each rank
    assert report["resumed_losses"] == report["full_losses"] and len(report["full_losses"]) == 4
    assert report["resumed_equals_full"] and report["ranks_agree"]
    # 2 ranks x 2 samples x 2 accumulated = the reference's 8 samples per step
    _assert_close(load_file(tmp_path / "checkpoint-4" / "model.safetensors"), reference)

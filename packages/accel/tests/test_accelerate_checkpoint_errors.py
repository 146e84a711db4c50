"""load_state on an Accelerate checkpoint whose objects do not match this Accelerator's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accel import Accelerator
from accel_checkpoint.errors import CheckpointError

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


class _Counter:
    def state_dict(self) -> dict:
        return {"n": 0}

    def load_state_dict(self, state: dict) -> None:
        pass


def test_a_different_number_of_objects_is_named():
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(3, 1))  # the checkpoint holds two of each
    # optimizers, schedulers and custom objects are counted first; models after the load
    # hooks (which may take some, as Accelerate lets them)
    with pytest.raises(CheckpointError, match="holds 2 optimizer state.*this Accelerator has 0"):
        accelerator.load_state(str(FIXTURES / "safetensors"))


def test_models_are_counted_after_the_load_hooks():
    """Accelerate runs the load pre-hooks first: a model a hook pops is not counted."""
    accelerator = Accelerator(cpu=True)
    models = [torch.nn.Linear(3, 1) for _ in range(3)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models[:2]]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=1)
    accelerator.prepare(*models, *optimizers, scheduler)
    accelerator.register_for_checkpointing(_Counter())
    seen = []
    accelerator.register_load_state_pre_hook(lambda ms, path: seen.append(len(ms)))
    with pytest.raises(CheckpointError, match="holds 2 model state.*this Accelerator has 3"):
        accelerator.load_state(str(FIXTURES / "safetensors"))
    assert seen == [3]  # the hook ran before the count

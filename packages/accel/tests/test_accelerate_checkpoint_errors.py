"""load_state on an Accelerate checkpoint whose objects do not match this Accelerator's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accel_checkpoint.errors import CheckpointError

from accel import Accelerator

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


def test_a_different_number_of_objects_is_named():
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(3, 1))  # the checkpoint holds two models
    with pytest.raises(CheckpointError, match="holds 2 model state.*this Accelerator has 1"):
        accelerator.load_state(str(FIXTURES / "safetensors"))

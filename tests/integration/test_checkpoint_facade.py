"""Accelerator checkpoint methods in one process: hooks, custom objects, naming, weights."""

from __future__ import annotations

import pytest
import torch
from accel_checkpoint import CorruptCheckpointError
from accel_state.errors import ConfigurationError
from torch import nn

from accel import Accelerator
from accel.utils import ProjectConfiguration


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def test_hooks_custom_objects_and_weights(tmp_path):
    accelerator = Accelerator(cpu=True, project_dir=str(tmp_path))
    assert accelerator.project_dir == str(tmp_path) == accelerator.logging_dir
    model = accelerator.prepare(nn.Linear(3, 2))
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    with pytest.raises(ConfigurationError, match="item 0"):
        accelerator.register_for_checkpointing(object())
    seen = []
    handle = accelerator.register_save_state_pre_hook(
        lambda models, weights, out: seen.append((len(models), len(weights), out)))
    counter.value = 7
    accelerator.step = 11
    path = accelerator.save_state(tmp_path / "a")
    assert seen == [(1, 1, str(tmp_path / "a"))]
    handle.remove()
    accelerator.save_state(tmp_path / "b")
    assert len(seen) == 1

    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    counter.value, accelerator.step = 0, 0
    skipped = []
    accelerator.register_load_state_pre_hook(lambda models, d: skipped.append(models.pop()))
    accelerator.load_state(path)
    assert counter.value == 7 and accelerator.step == 11
    assert skipped and torch.count_nonzero(model.weight) == 0  # the hook removed the model
    accelerator._load_model_state_pre_hook.clear()
    accelerator.load_state(path)
    assert torch.equal(model.weight, expected)

    accelerator.save_model(model, tmp_path / "weights")
    assert (tmp_path / "weights" / "model.safetensors").is_file()
    assert set(accelerator.get_state_dict(model)) == {"weight", "bias"}
    (tmp_path / "b" / "manifest.json").write_text("{}")
    with pytest.raises(CorruptCheckpointError, match="manifest.json"):
        accelerator.load_state(tmp_path / "b")


def test_automatic_naming_refuses_to_overwrite_and_needs_a_path_otherwise(tmp_path):
    config = ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(nn.Linear(2, 2))
    accelerator.save_state()
    assert accelerator.save_iteration == 1
    config.iteration = 0
    with pytest.raises(ConfigurationError, match="already exists.*load_state"):
        accelerator.save_state()
    plain = Accelerator(cpu=True)
    with pytest.raises(ConfigurationError, match="output_dir"):
        plain.save_state()
    with pytest.raises(ConfigurationError, match="input_dir"):
        plain.load_state()

"""Accelerator checkpoint methods in one process: hooks, custom objects, naming, weights."""

from __future__ import annotations

import time

import pytest
import torch
from accel_checkpoint import CheckpointError, CorruptCheckpointError
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
    with pytest.raises(ConfigurationError, match="Item at index 0"):
        accelerator.register_for_checkpointing(object())
    seen = []
    handle = accelerator.register_save_state_pre_hook(
        lambda models, weights, out: seen.append((len(models), len(weights), out)))
    counter.value = 7
    accelerator.step = 11
    path = accelerator.save_state(tmp_path / "a")
    # hooks write into the staging directory that is renamed into place
    assert len(seen) == 1 and seen[0][:2] == (1, 1)
    assert seen[0][2].startswith(str(tmp_path / "a.tmp-"))
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


def test_hook_files_are_committed_verified_and_gate_background_loads(tmp_path):
    """The diffusers pattern: a save hook writes the model itself and pops its weights; a
    load hook reads it back. Those files are in the manifest, so a flipped byte in them is
    refused — at load_state (full) or at the first optimizer step (background)."""
    from accel_checkpoint import read_object
    from accel_checkpoint.manifest import read_manifest
    from accel_checkpoint.weights import load_model_weights, save_model_weights

    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(nn.Linear(4, 4), torch.optim.SGD(
        nn.Linear(4, 4).parameters(), lr=0.1))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))

    def save_hook(models, weights, output_dir):
        save_model_weights(weights.pop(), f"{output_dir}/net")

    def load_hook(models, input_dir):
        load_model_weights(models.pop(), f"{input_dir}/net")

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
    path = accelerator.save_state(tmp_path / "ckpt")
    manifest = read_manifest(path)
    assert "net/model.safetensors" in manifest.files and "model" not in manifest.objects
    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(path)
    assert torch.equal(model.weight, expected)
    good = accelerator.save_state(tmp_path / "good")

    target = tmp_path / "ckpt" / "net" / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="net/model.safetensors"):
        accelerator.load_state(path)
    assert read_object(path, "optimizer") is not None  # other files still read fine

    accelerator.load_state(path, verify="background")  # returns before the sha256 check
    model(torch.ones(1, 4)).sum().backward()
    with pytest.raises(CorruptCheckpointError, match="net/model.safetensors"):
        optimizer.step()
    with pytest.raises(CorruptCheckpointError, match="net/model.safetensors"):
        accelerator.save_state(tmp_path / "after")  # still refused: the state is bad
    assert not (tmp_path / "after").exists()
    with pytest.raises(ConfigurationError, match="'fast'.*full or background"):
        accelerator.load_state(path, verify="fast")
    with pytest.raises(CheckpointError, match="missing"):  # a refused load changes nothing:
        accelerator.load_state(tmp_path / "missing")
    with pytest.raises(CorruptCheckpointError, match="net/model.safetensors"):
        optimizer.step()  # the bad state is still guarded
    # the error belongs to the load that found it: loading a good checkpoint recovers
    accelerator.load_state(good, verify="full")
    assert torch.equal(model.weight, expected)
    optimizer.step()
    assert accelerator.save_state(tmp_path / "after")


def test_background_verification_passes_and_async_save_defers_the_copy(tmp_path, monkeypatch):
    """A good checkpoint loaded in the background trains on as usual; an async save
    returns before copying parameters and optimizer state, yet holds the values of the
    moment it was called although the optimizer steps right after."""
    import accel_checkpoint.saving as saving

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(8, 8)
    model, optimizer = accelerator.prepare(model, torch.optim.Adam(model.parameters(), lr=0.1))

    def train_step():
        model(torch.randn(2, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    train_step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    staged = []
    real_stage = saving.stage

    def slow_stage(parts):  # without the gate, the step below would win this race
        staged.append(sum(len(p.deferred) for p in parts))
        time.sleep(0.3)
        real_stage(parts)

    monkeypatch.setattr(saving, "stage", slow_stage)
    import accel_checkpoint.manager as manager
    monkeypatch.setattr(manager, "stage", saving.stage)
    accelerator.save_state(tmp_path / "a", async_save=True)
    train_step()  # waits for the copy, then changes the parameters
    accelerator.wait_for_checkpoint()
    # copied after returning: weight and bias, and Adam's step, exp_avg, exp_avg_sq of each
    assert staged[0] == 2 + 3 * 2
    accelerator.load_state(tmp_path / "a", verify="background")
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    train_step()  # the gate passes: the checkpoint is intact
    assert accelerator._checkpoint_verification is None


def test_custom_state_written_by_a_hook_is_verified_by_load_custom_state(tmp_path):
    """Accelerate's save_custom_state/load_custom_state from hooks: the files land in the
    manifest, so load_custom_state checks them; outside a checkpoint they load unchecked."""
    from accel.checkpointing import load_custom_state, save_custom_state

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(2, 2))
    counter = Counter()
    counter.value = 5
    accelerator.register_save_state_pre_hook(
        lambda models, weights, out: save_custom_state(counter, out, index=3))
    path = accelerator.save_state(tmp_path / "ckpt")
    fresh = Counter()
    load_custom_state(fresh, path, index=3)
    assert fresh.value == 5
    target = tmp_path / "ckpt" / "custom_checkpoint_3.json"
    target.write_text(target.read_text().replace("5", "6"))
    with pytest.raises(CorruptCheckpointError, match="custom_checkpoint_3.json"):
        load_custom_state(Counter(), path, index=3)
    save_custom_state(counter, tmp_path, index=0)  # a plain directory: no manifest
    load_custom_state(fresh, tmp_path, index=0)
    assert fresh.value == 5

"""Hugging Face weight layout: single file or shards + index, tied weights written once."""

from __future__ import annotations

import json

import pytest
import torch
from accel_checkpoint import (
    CheckpointError,
    ProjectConfiguration,
    convert_file_size_to_int,
    load,
    load_model_weights,
    save,
    save_model_weights,
)
from accel_state.errors import ConfigurationError
from torch import nn

safetensors_torch = pytest.importorskip("safetensors.torch")


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def test_single_file_dedupes_tied_weights_and_reloads(tmp_path, caplog):
    model = Tied()
    files = save_model_weights(model.state_dict(), tmp_path)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "head.weight (tied to embed.weight)" in caplog.text
    assert [f.name for f in files] == ["model.safetensors"]
    stored = safetensors_torch.load_file(tmp_path / "model.safetensors")
    assert "head.weight" not in stored and "embed.weight" in stored
    fresh = Tied()
    load_model_weights(fresh, tmp_path, strict=True)
    assert torch.equal(fresh.head.weight, model.embed.weight)
    assert torch.equal(fresh.body.weight, model.body.weight)


def test_shards_and_index_then_stale_shards_removed(tmp_path):
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)])
    (tmp_path / "notes.txt").write_text("keep me")
    files = save_model_weights(model.state_dict(), tmp_path, max_shard_size="2KB")
    shards = sorted(f.name for f in files if f.suffix == ".safetensors")
    assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(model.state_dict())
    fresh = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)])
    load_model_weights(fresh, tmp_path / "model.safetensors.index.json", strict=True,
                       dtype=torch.float64)
    assert fresh[0].weight.dtype == torch.float32  # load_state_dict copies into fp32 params
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                 model.state_dict().values()))
    save_model_weights(model.state_dict(), tmp_path)  # now fits in one file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors", "notes.txt"]


def test_a_shard_that_fails_leaves_no_temporary_file_and_the_old_save_intact(tmp_path):
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(3)])
    save_model_weights(model.state_dict(), tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()
    state = dict(model.state_dict())
    state["2.weight"] = torch.zeros(16, 16, dtype=torch.complex128)  # safetensors can't store it
    with pytest.raises(CheckpointError, match="complex128"):
        save_model_weights(state, tmp_path, max_shard_size="2KB")  # the last shard fails
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert not (tmp_path / "model.safetensors.index.json").exists()


def test_bin_weights_load_with_weights_only(tmp_path):
    model = nn.Linear(3, 3)
    save_model_weights(model.state_dict(), tmp_path, safe_serialization=False)
    fresh = nn.Linear(3, 3)
    load_model_weights(fresh, tmp_path / "pytorch_model.bin", strict=True)
    assert torch.equal(fresh.weight, model.weight)
    with pytest.raises(CheckpointError, match="unexpected.*bias"):
        load_model_weights(nn.Linear(3, 3, bias=False), tmp_path, strict=True)


def test_sizes_and_project_configuration_validation():
    assert convert_file_size_to_int("10GB") == 10**10
    assert convert_file_size_to_int("2MiB") == 2 * 2**20
    with pytest.raises(ConfigurationError, match="'ten'"):  # a ValueError, as in Accelerate
        convert_file_size_to_int("ten")
    with pytest.raises(ValueError, match="'5MBB'"):
        convert_file_size_to_int("5MBB")
    config = ProjectConfiguration("runs/a", automatic_checkpoint_naming=True, total_limit=2)
    assert config.logging_dir == "runs/a" and str(config.checkpoints_dir) == "runs/a/checkpoints"
    with pytest.raises(ConfigurationError, match="total_limit"):
        ProjectConfiguration("x", total_limit=0)
    later = ProjectConfiguration(automatic_checkpoint_naming=True)  # project_dir comes later
    with pytest.raises(ConfigurationError, match="project_dir"):
        later.check_automatic_naming()
    later.set_directories("runs/b")
    later.check_automatic_naming()
    assert str(later.checkpoints_dir) == "runs/b/checkpoints"


def test_save_with_safetensors_writes_a_shared_tensor_once_and_logs_it(tmp_path, caplog):
    model = Tied()
    state = model.state_dict()
    save(state, tmp_path / "tied.safetensors", safe_serialization=True)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "Removed shared tensor" in caplog.text and "head.weight" in caplog.text
    stored = safetensors_torch.load_file(tmp_path / "tied.safetensors")
    assert sorted(stored) == ["body.bias", "body.weight", "embed.weight"]
    assert "head.weight" in state  # the caller's dict is left whole
    caplog.clear()
    save(state, tmp_path / "tied.bin")  # pickle keeps the aliasing: nothing is dropped
    assert not caplog.records and sorted(load(tmp_path / "tied.bin")) == sorted(state)

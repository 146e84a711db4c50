"""Accelerate's ``save_fsdp_model`` / ``load_fsdp_model`` / ``save_fsdp_optimizer`` /
``load_fsdp_optimizer`` (``accel.utils``), in one process on FSDP2: Accelerate's file names,
exact round trips for full and sharded state dicts, and clear errors. The 2-process run is
in tests/integration/scripts/fsdp_checks.py."""

from __future__ import annotations

import pytest
import torch
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.utils import (
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from accel_checkpoint.errors import CheckpointError
from torch import nn


@pytest.fixture
def trained():
    """A one-process FSDP2 model and SGD-with-momentum optimizer after one step."""
    import torch.distributed as dist

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
    optimizer.step()
    try:
        yield accelerator, model, optimizer
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _snapshot(model: nn.Module, optimizer) -> tuple[dict, list]:
    weights = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    momenta = [optimizer.optimizer.state[p]["momentum_buffer"].full_tensor().clone()
               for p in model.parameters()]
    return weights, momenta


def _scramble(model: nn.Module, optimizer) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
            optimizer.optimizer.state[p]["momentum_buffer"].zero_()


@pytest.mark.parametrize(("kind", "model_file", "optimizer_file"), [
    ("FULL_STATE_DICT", "pytorch_model_fsdp_1.bin", "optimizer_2.bin"),
    ("SHARDED_STATE_DICT", "pytorch_model_fsdp_1/.metadata", "optimizer_2/.metadata"),
])
def test_round_trip_with_accelerates_file_names(trained, tmp_path, kind, model_file,
                                                optimizer_file):
    accelerator, model, optimizer = trained
    plugin = FullyShardedDataParallelPlugin(state_dict_type=kind)
    weights, momenta = _snapshot(model, optimizer)
    save_fsdp_model(plugin, accelerator, model, tmp_path, model_index=1)
    save_fsdp_optimizer(plugin, accelerator, optimizer, model, tmp_path, optimizer_index=2)
    assert (tmp_path / model_file).is_file() and (tmp_path / optimizer_file).is_file()
    _scramble(model, optimizer)
    load_fsdp_model(plugin, accelerator, model, tmp_path, model_index=1)
    load_fsdp_optimizer(plugin, accelerator, optimizer, model, tmp_path, optimizer_index=2)
    got_weights, got_momenta = _snapshot(model, optimizer)
    for key, value in weights.items():
        assert torch.equal(got_weights[key], value), key
    for got, expected in zip(got_momenta, momenta, strict=True):
        assert torch.equal(got, expected)


def test_index_zero_full_files_carry_no_number(trained, tmp_path):
    accelerator, model, optimizer = trained
    plugin = FullyShardedDataParallelPlugin(state_dict_type="FULL_STATE_DICT")
    save_fsdp_model(plugin, accelerator, model, tmp_path)
    save_fsdp_optimizer(plugin, accelerator, optimizer, model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optimizer.bin",
                                                          "pytorch_model_fsdp.bin"]
    state = torch.load(tmp_path / "pytorch_model_fsdp.bin", weights_only=True)
    assert set(state) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # plain tensors


def test_sharded_load_accepts_the_dcp_directory_itself(trained, tmp_path):
    accelerator, model, optimizer = trained
    plugin = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT")
    weights, _ = _snapshot(model, optimizer)
    save_fsdp_model(plugin, accelerator, model, tmp_path)
    _scramble(model, optimizer)
    load_fsdp_model(plugin, accelerator, model, tmp_path / "pytorch_model_fsdp_0")
    assert all(torch.equal(v.full_tensor(), weights[k]) for k, v in model.state_dict().items())


def test_missing_or_mismatched_files_are_clear_errors(trained, tmp_path):
    accelerator, model, optimizer = trained
    full = FullyShardedDataParallelPlugin(state_dict_type="FULL_STATE_DICT")
    sharded = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT")
    with pytest.raises(CheckpointError, match="pytorch_model_fsdp.bin does not exist"):
        load_fsdp_model(full, accelerator, model, tmp_path)
    save_fsdp_model(full, accelerator, model, tmp_path)
    with pytest.raises(CheckpointError, match="not a sharded FSDP checkpoint"):
        load_fsdp_optimizer(sharded, accelerator, optimizer, model, tmp_path)


def test_local_state_dict_is_refused(trained, tmp_path):
    accelerator, model, _ = trained

    class Local:  # an FSDP1-era plugin asking for per-rank flat shards
        state_dict_type = "LOCAL_STATE_DICT"

    with pytest.raises(CheckpointError, match="LOCAL_STATE_DICT is FSDP1-only"):
        save_fsdp_model(Local(), accelerator, model, tmp_path)


def test_adapter_only_saves_and_loads_a_peft_models_adapter(trained, tmp_path, monkeypatch):
    """transformers' Trainer always passes adapter_only=True: a peft model goes through peft's
    own adapter state-dict functions (a stand-in peft here), any other model is saved whole."""
    import sys
    import types

    accelerator, model, _ = trained
    plugin = FullyShardedDataParallelPlugin(state_dict_type="FULL_STATE_DICT")
    save_fsdp_model(plugin, accelerator, model, tmp_path / "plain", adapter_only=True)
    whole = torch.load(tmp_path / "plain" / "pytorch_model_fsdp.bin", weights_only=True)
    assert set(whole) == {"0.weight", "0.bias", "2.weight", "2.bias"}

    class PeftModel(nn.Module):
        active_adapter = "default"

        def __init__(self) -> None:
            super().__init__()
            self.lora = nn.Linear(2, 2)

    loaded = {}

    def get_peft_model_state_dict(model, adapter_name):
        return {f"lora.{adapter_name}": model.lora.weight.detach().clone()}

    def set_peft_model_state_dict(model, state, adapter_name):
        loaded.update(state, adapter=adapter_name)

    monkeypatch.setitem(sys.modules, "peft", types.SimpleNamespace(
        PeftModel=PeftModel, get_peft_model_state_dict=get_peft_model_state_dict,
        set_peft_model_state_dict=set_peft_model_state_dict))
    peft_model = PeftModel()
    save_fsdp_model(plugin, accelerator, peft_model, tmp_path / "peft", adapter_only=True)
    adapter = torch.load(tmp_path / "peft" / "pytorch_model_fsdp.bin", weights_only=True)
    assert list(adapter) == ["lora.default"]
    load_fsdp_model(plugin, accelerator, peft_model, tmp_path / "peft", adapter_only=True)
    assert loaded["adapter"] == "default"
    assert torch.equal(loaded["lora.default"], peft_model.lora.weight)

"""Behaviour Accelerate's own test suite checks in accel-inference (issue 15): shape checks,
fp8 offload files, all-disk dispatch, the state dict of an offloaded model, checkpoint indexes."""

from __future__ import annotations

import json

import pytest
import torch
from accel_inference.big_modeling import dispatch_model
from accel_inference.loading import load_checkpoint_in_model
from accel_inference.offload import (
    get_state_dict_offloaded_model,
    load_offloaded_weight,
    offload_weight,
)
from accel_inference.tensors import set_module_tensor_to_device
from accel_state.errors import ConfigurationError
from torch import nn


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = nn.Linear(3, 4)
        self.batchnorm = nn.BatchNorm1d(4)
        self.linear2 = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.batchnorm(self.linear1(x)))


def test_a_value_of_another_shape_is_refused():
    model = _Net()
    words = r'shape torch.Size\(\[2, 2\]\) in "weight" \(which has shape torch.Size\(\[4, 3\]\)\)'
    with pytest.raises(ConfigurationError, match=words) as error:
        set_module_tensor_to_device(model, "linear1.weight", "cpu", value=torch.zeros(2, 2))
    assert isinstance(error.value, ValueError)
    assert model.linear1.weight.shape == (4, 3)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_offload_files_keep_dtypes_numpy_lacks(tmp_path, name):
    dtype = getattr(torch, name)
    weight = torch.randn(2, 3).to(dtype)
    index = offload_weight(weight, "w", tmp_path, {})
    assert index == {"w": {"dtype": name, "shape": [2, 3]}}
    back = load_offloaded_weight(tmp_path / "w.dat", index["w"])
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), weight.view(torch.uint8))


def test_all_disk_device_map_runs_on_the_cpu_and_state_dict_is_real(tmp_path):
    model = _Net().eval()
    expected_state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3)
    expected = model(x)
    dispatch_model(model, {"linear1": "disk", "batchnorm": "disk", "linear2": "disk"},
                   offload_dir=tmp_path)
    assert model.linear1.weight.device.type == "meta"  # the weights live in tmp_path
    torch.testing.assert_close(model(x), expected)
    state = get_state_dict_offloaded_model(model)
    assert list(state) == list(expected_state)
    for key, tensor in expected_state.items():
        assert state[key].device.type == "cpu" and torch.equal(state[key], tensor), key
    assert model.linear1.weight.device.type == "meta"  # brought in for the copy only


def test_checkpoint_index_without_weight_map_and_with_another_name(tmp_path):
    source = _Net()
    index = {}
    for part in ("linear1", "batchnorm", "linear2"):
        shard = {k: v for k, v in source.state_dict().items() if k.startswith(part)}
        torch.save(shard, tmp_path / f"{part}.bin")
        index.update(dict.fromkeys(shard, f"{part}.bin"))
    (tmp_path / "weight_map.index.json").write_text(json.dumps(index))  # a bare name -> file
    for target in (tmp_path / "weight_map.index.json", tmp_path):
        model = _Net()
        load_checkpoint_in_model(model, target)
        assert torch.equal(model.linear2.weight, source.linear2.weight)


def test_dtype_survives_offload_state_dict(tmp_path):
    source = nn.Linear(5, 10)
    source.register_buffer("counts", torch.arange(6))
    torch.save(source.state_dict(), tmp_path / "model.bin")
    model = nn.Linear(5, 10)
    model.register_buffer("counts", torch.zeros(6, dtype=torch.int64))
    load_checkpoint_in_model(model, tmp_path / "model.bin", offload_state_dict=True,
                             dtype=torch.float16, device_map={"": "cpu"})
    assert model.weight.dtype == torch.float16 and model.counts.dtype == torch.int64
    assert torch.equal(model.weight, source.weight.to(torch.float16))
    assert torch.equal(model.counts, torch.arange(6))

"""Where accel-inference met Accelerate 1.15 only halfway (issue 24): what each helper warns,
raises, loads and hands back, checked against what Accelerate does with the same input."""

from __future__ import annotations

import logging
import sys
import types
import warnings

import numpy as np
import pytest
import torch
from accel_inference import (
    check_device_map,
    dispatch_model,
    get_max_memory,
    get_non_persistent_buffers,
    load_checkpoint_in_model,
    named_module_tensors,
    set_module_tensor_to_device,
)
from safetensors.torch import save_file
from torch import nn


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)


class _Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.ones(1), persistent=False)
        self.sub = nn.Module()
        self.sub.register_buffer("c", torch.ones(1), persistent=False)
        self.sub.register_buffer("d", torch.ones(1))


# -- check_device_map ---------------------------------------------------------------------------
def test_unknown_keys_warn_with_accelerates_text_and_tensor_keys_count_as_unknown():
    model = _Two()
    with pytest.warns(UserWarning) as record:
        check_device_map(model, {"": "cpu", "zz": 0})
    assert str(record[0].message) == \
        "The following device_map keys do not match any submodules in the model: ['zz']"
    with pytest.warns(UserWarning, match=r"\['a.weight', 'a.bias'\]"):
        check_device_map(model, {"a.weight": "cpu", "a.bias": 0, "b": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_device_map(model, {"a": "cpu", "b": "disk"})


def test_uncovered_tensors_raise_value_error_listing_them_and_unknown_still_warns():
    model = _Two()
    with pytest.warns(UserWarning, match=r"\['q'\]"), pytest.raises(ValueError) as error:
        check_device_map(model, {"a": "cpu", "q": 1})
    assert str(error.value).startswith("The device_map provided does not give any device for "
                                       "the following parameters: b.weight, b.bias.")


def test_dispatch_with_an_unknown_key_warns_and_runs(tmp_path):
    model = _Two()
    expected = model.b(model.a(torch.ones(1, 2)))
    device_map = {"a": "cpu", "b": "disk", "zz": "cpu"}
    with pytest.warns(UserWarning, match=r"\['zz'\]"):
        dispatch_model(model, device_map, offload_dir=tmp_path)
    assert model.hf_device_map == device_map
    torch.testing.assert_close(model.b(model.a(torch.ones(1, 2))), expected)


def test_device_names_and_non_persistent_buffers_are_not_checked():
    check_device_map(_Two(), {"": "gpu1"})  # Accelerate leaves devices to dispatch
    check_device_map(_Buffers(), {"sub": "cpu"})  # b is not in the state dict


# -- get_non_persistent_buffers ----------------------------------------------------------------
def test_non_persistent_buffers_names_as_accelerate_and_the_module_untouched():
    model = _Buffers()
    before = (set(model._non_persistent_buffers_set), set(model.sub._non_persistent_buffers_set))
    assert get_non_persistent_buffers(model) == {"b"}
    assert get_non_persistent_buffers(model, recurse=True) == {"b", "c"}
    assert get_non_persistent_buffers(model, recurse=True, fqns=True) == {"b", ".b", "sub.c"}
    found = get_non_persistent_buffers(model, recurse=True)
    found.add("intruder")
    get_non_persistent_buffers(model).add("intruder")
    after = (model._non_persistent_buffers_set, model.sub._non_persistent_buffers_set)
    assert after == before == ({"b"}, {"c"})
    assert "intruder" not in model.state_dict() and set(model.state_dict()) == {"sub.d"}


def test_named_module_tensors_drops_nested_non_persistent_buffers():
    names = [n for n, _ in named_module_tensors(_Buffers(), recurse=True,
                                                remove_non_persistent=True)]
    assert names == ["sub.d"]


# -- load_checkpoint_in_model ------------------------------------------------------------------
@pytest.fixture
def checkpoint(tmp_path):
    state = {k: torch.randn_like(v) for k, v in _Two().state_dict().items()}
    save_file({**state, "extra.weight": torch.ones(3)}, tmp_path / "model.safetensors")
    return state, tmp_path / "model.safetensors"


@pytest.mark.parametrize("device_map", [None, {"": "cpu"}, {"a": "cpu", "b": "cpu"}])
def test_unexpected_keys_are_skipped_with_accelerates_warning(checkpoint, device_map, caplog):
    state, path = checkpoint
    model = _Two()
    with caplog.at_level(logging.WARNING, logger="accel.big_modeling"):
        load_checkpoint_in_model(model, path, device_map=device_map)
    assert caplog.messages == [
        f"Some weights of the model checkpoint at {path} were not used when initializing _Two: "
        "{'extra.weight'}. This may or may not be an issue - make sure that the checkpoint does "
        "not have unnecessary parameters, or that the model definition correctly corresponds "
        "to the checkpoint."]
    assert not hasattr(model, "extra")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, state[name])


def test_strict_mismatch_is_a_runtime_error_as_torchs(checkpoint):
    state, path = checkpoint
    model = _Two()
    with pytest.raises(RuntimeError, match=r"unexpected key\(s\) \['extra.weight'\].*strict="):
        load_checkpoint_in_model(model, path, strict=True)
    # as torch's load_state_dict: the names that match were loaded before the error
    torch.testing.assert_close(model.b.weight, state["b.weight"])
    with pytest.raises(ValueError, match="extra.weight"):
        load_checkpoint_in_model(model, path, device_map={"": "cpu"}, strict=True)


def test_without_a_map_a_built_model_is_loaded_in_place(checkpoint):
    state, path = checkpoint
    model = _Two().to(torch.float64)
    weight = model.a.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    load_checkpoint_in_model(model, path)
    assert model.a.weight is weight and optimizer.param_groups[0]["params"][0] is weight
    assert weight.dtype == torch.float64  # the model's dtype, as load_state_dict keeps it
    torch.testing.assert_close(weight, state["a.weight"].double())


def test_a_map_key_naming_nothing_does_not_warn_when_loading(checkpoint):
    _, path = checkpoint
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint_in_model(_Two(), path, device_map={"": "cpu", "gone": "cpu"})


# -- set_module_tensor_to_device ---------------------------------------------------------------
@pytest.mark.parametrize("value", [torch.zeros(3, 2), np.zeros((3, 2), dtype=np.float32)])
def test_a_value_of_another_shape_is_a_value_error_with_accelerates_text(value):
    model = _Two()
    weight = model.a.weight
    with pytest.raises(ValueError) as error:
        set_module_tensor_to_device(model, "a.weight", "cpu", value=value)
    assert str(error.value) == (  # word for word: Accelerate's tests compare the text
        f'Trying to set a tensor of shape {value.shape} in "weight" (which has shape '
        "torch.Size([2, 2])), this looks incorrect.")
    if sys.version_info >= (3, 11):  # the fix, in a note the traceback shows
        assert "'a.weight'" in error.value.__notes__[0]
    assert model.a.weight is weight
    # refused before anything changes, a tied weight already placed included
    tied = {value.data_ptr(): {"cpu": torch.ones(3, 2)}} if isinstance(value, torch.Tensor) \
        else None
    with pytest.raises(ValueError, match="this looks incorrect"):
        set_module_tensor_to_device(model, "a.weight", "cpu", value=value, tied_params_map=tied)
    assert model.a.weight is weight


# -- get_max_memory ----------------------------------------------------------------------------
def test_max_memory_strings_become_ints_in_the_callers_dict():
    asked = {"cpu": "300KB", 0: 1000, "disk": "1GiB"}
    result = get_max_memory(asked)
    assert asked == {"cpu": 300_000, 0: 1000, "disk": 2**30}
    assert result == {0: 1000, "cpu": 300_000, "disk": 2**30}
    assert list(result) == [0, "cpu", "disk"]
    frozen = types.MappingProxyType({"cpu": "1KB"})
    assert get_max_memory(frozen) == {"cpu": 1000} and frozen["cpu"] == "1KB"


def test_max_memory_for_a_missing_gpu_warns_as_accelerate(caplog, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with caplog.at_level(logging.WARNING, logger="accel.big_modeling"):
        assert get_max_memory({3: 10, 0: 5}) == {0: 5, 3: 10}
    assert caplog.messages == ["Device 3 is not available, available devices are [0]"]

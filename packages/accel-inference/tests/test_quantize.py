"""bitsandbytes quantisation (Accelerate's BnbQuantizationConfig / load_and_quantize_model /
has_4bit_bnb_layers). The configuration and the error paths run everywhere; quantising runs
where bitsandbytes is installed (its CPU kernels: no GPU needed)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from accel_inference import init_empty_weights
from accel_inference.quantize import (
    BnbQuantizationConfig,
    get_keys_to_not_convert,
    has_4bit_bnb_layers,
    load_and_quantize_model,
)
from accel_state.enums import CustomDtype
from accel_state.errors import ConfigurationError, MissingDependencyError
from safetensors.torch import save_file
from torch import nn

needs_bnb = pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                               reason='needs bitsandbytes (pip install "accel[bnb]")')


def test_config_defaults_follow_accelerate():
    eight = BnbQuantizationConfig(load_in_8bit=True)
    assert (eight.llm_int8_threshold, eight.torch_dtype, eight.target_dtype) == \
        (6.0, torch.float16, torch.int8)
    four = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="bf16")
    assert (four.bnb_4bit_quant_type, four.bnb_4bit_use_double_quant) == ("fp4", False)
    assert four.bnb_4bit_compute_dtype is torch.bfloat16 and four.torch_dtype is torch.bfloat16
    assert four.target_dtype is CustomDtype.INT4 and four.skip_modules is None
    custom = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   torch_dtype=torch.float32, skip_modules=("lm_head",),
                                   keep_in_fp32_modules=["norm"])
    assert (custom.torch_dtype, custom.skip_modules, custom.keep_in_fp32_modules) == \
        (torch.float32, ["lm_head"], ["norm"])
    with pytest.warns(UserWarning, match="llm_int8_threshold only applies to 8-bit"):
        BnbQuantizationConfig(load_in_4bit=True, llm_int8_threshold=3.0)


@pytest.mark.parametrize("kwargs, message", [
    ({}, r"load_in_8bit=False, load_in_4bit=False\): set exactly one"),
    ({"load_in_8bit": True, "load_in_4bit": True}, r"set exactly one of them to True"),
    ({"load_in_8bit": 1}, r"load_in_8bit=1\) must be True or False"),
    ({"load_in_8bit": True, "llm_int8_threshold": "6"}, r"llm_int8_threshold='6'\) must be a "
                                                        r"number"),
    ({"load_in_4bit": True, "bnb_4bit_quant_type": "int4"}, r"'int4'\) must be 'fp4' or 'nf4'"),
    ({"load_in_4bit": True, "bnb_4bit_use_double_quant": "no"}, r"use_double_quant='no'"),
    ({"load_in_4bit": True, "bnb_4bit_compute_dtype": "fp64"}, r"compute_dtype='fp64'\) must be "
                                                               r"'fp32', 'fp16', 'bf16'"),
    ({"load_in_8bit": True, "torch_dtype": torch.int8}, r"torch_dtype=torch.int8\)"),
    ({"load_in_8bit": True, "skip_modules": "lm_head"}, r"skip_modules='lm_head'\) must be a "
                                                        r"list of module names"),
    ({"load_in_8bit": True, "keep_in_fp32_modules": [1]}, r"keep_in_fp32_modules=\[1\]"),
])
def test_bad_config_values_are_refused_with_the_value_named(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        BnbQuantizationConfig(**kwargs)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 64)
        self.body = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
        self.norm = nn.LayerNorm(64)
        self.lm_head = nn.Linear(64, 20)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.body(self.embed(ids))))


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


IDS = torch.tensor([[1, 4, 7, 19, 0, 3]])


def test_keys_to_not_convert_are_the_head_and_tied_modules():
    assert get_keys_to_not_convert(_net()) == ["lm_head"]
    tied = _net()
    tied.lm_head = nn.Linear(64, 20, bias=False)
    tied.lm_head.weight = tied.embed.weight
    assert sorted(get_keys_to_not_convert(tied)) == ["embed", "lm_head"]
    base = _net()
    base.base_model_prefix = "transformer"  # a transformers base model: no head to keep
    assert get_keys_to_not_convert(base) == []


def test_without_bitsandbytes_quantising_names_the_extra(monkeypatch):
    import accel_inference.quantize as quantize

    monkeypatch.setattr(quantize, "is_package_available", lambda name: False)
    with pytest.raises(MissingDependencyError, match=r'pip install "accel\[bnb\]"') as caught:
        load_and_quantize_model(_net(), BnbQuantizationConfig(load_in_4bit=True))
    assert "4-bit quantisation" in str(caught.value)
    monkeypatch.setattr(quantize, "is_package_available", lambda name: True)
    monkeypatch.setattr(quantize, "is_bnb_available", lambda version=None: False)
    with pytest.raises(MissingDependencyError, match=r"bitsandbytes>=0.37.2"):
        load_and_quantize_model(_net(), BnbQuantizationConfig(load_in_8bit=True))
    with pytest.raises(ConfigurationError, match="must be a BnbQuantizationConfig"):
        load_and_quantize_model(_net(), {"load_in_8bit": True})


def test_no_4bit_layers_without_bitsandbytes_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)
    assert has_4bit_bnb_layers(_net()) is False


@needs_bnb
@pytest.mark.parametrize("bits", [8, 4])
def test_a_loaded_model_is_quantised_in_place(bits):
    import bitsandbytes as bnb

    reference = _net()
    expected = reference(IDS)
    kind = {8: bnb.nn.Linear8bitLt, 4: bnb.nn.Linear4bit}[bits]
    config = (BnbQuantizationConfig(load_in_8bit=True, torch_dtype="fp32") if bits == 8 else
              BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_compute_dtype="fp32"))
    model = load_and_quantize_model(_net(), config)
    assert config.skip_modules == ["lm_head"]  # filled in, as Accelerate does
    assert isinstance(model.body[0], kind) and isinstance(model.body[2], kind)
    assert type(model.lm_head) is nn.Linear  # the head stays in full precision
    stored = {8: torch.int8, 4: torch.uint8}[bits]
    assert model.body[0].weight.dtype == stored
    assert (model.is_loaded_in_8bit, model.is_loaded_in_4bit) == (bits == 8, bits == 4)
    assert has_4bit_bnb_layers(model) is (bits == 4)
    with torch.no_grad():
        got = model(IDS)
    error = (got - expected).abs().max().item()
    assert error < {8: 0.05, 4: 0.3}[bits], error
    assert error > 0  # really quantised


def _checkpoint(tmp_path) -> tuple[str, torch.Tensor]:
    model = _net()
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return str(path), model(IDS).detach()


@needs_bnb
def test_an_empty_model_is_loaded_quantised_from_a_checkpoint(tmp_path):
    import bitsandbytes as bnb

    checkpoint, expected = _checkpoint(tmp_path)
    config = BnbQuantizationConfig(load_in_8bit=True, torch_dtype=torch.float32,
                                   keep_in_fp32_modules=["norm"])
    in_place = load_and_quantize_model(_net(), BnbQuantizationConfig(
        load_in_8bit=True, torch_dtype=torch.float32))
    with init_empty_weights():
        empty = Net()
    model = load_and_quantize_model(empty, config, weights_location=checkpoint)
    assert isinstance(model.body[0], bnb.nn.Linear8bitLt)
    assert model.body[0].weight.dtype == torch.int8 and model.norm.weight.dtype == torch.float32
    assert not any(p.is_meta for p in model.parameters())
    with torch.no_grad():
        got = model(IDS)
        torch.testing.assert_close(got, in_place(IDS))  # same quantisation either way
    assert (got - expected).abs().max() < 0.05


@needs_bnb
def test_device_maps_auto_and_with_a_disk_offloaded_module(tmp_path):
    import bitsandbytes as bnb

    checkpoint, expected = _checkpoint(tmp_path)
    config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="fp32")
    with init_empty_weights():
        empty = Net()
    auto = load_and_quantize_model(empty, config, weights_location=checkpoint,
                                   device_map="auto", max_memory={"cpu": "1GiB"})
    assert auto.hf_device_map == {"": "cpu"}
    assert isinstance(auto.body[0], bnb.nn.Linear4bit)
    with torch.no_grad():
        assert (auto(IDS) - expected).abs().max() < 0.3
    # a dict map sending a block to disk: that block stays unquantised, in torch_dtype
    with init_empty_weights():
        empty = Net()
    device_map = {"embed": "cpu", "body.0": "cpu", "body.1": "cpu", "body.2": "disk",
                  "norm": "cpu", "lm_head": "cpu"}
    mixed = load_and_quantize_model(empty, BnbQuantizationConfig(
        load_in_4bit=True, bnb_4bit_compute_dtype="fp32"), weights_location=checkpoint,
        device_map=device_map, offload_folder=tmp_path / "offload")
    assert isinstance(mixed.body[0], bnb.nn.Linear4bit) and type(mixed.body[2]) is nn.Linear
    assert (tmp_path / "offload" / "index.json").is_file()
    with torch.no_grad():
        assert (mixed(IDS) - expected).abs().max() < 0.3


@needs_bnb
def test_bad_arguments_to_load_and_quantize_model(tmp_path):
    config = BnbQuantizationConfig(load_in_8bit=True)
    with init_empty_weights():
        empty = Net()
    with pytest.raises(ConfigurationError, match="pass weights_location="):
        load_and_quantize_model(empty, config)
    assert type(empty.body[0]) is nn.Linear  # refused before anything was changed
    checkpoint, _ = _checkpoint(tmp_path)
    with init_empty_weights():
        empty = Net()
    with pytest.raises(ConfigurationError, match=r"device_map='everywhere' is not known"):
        load_and_quantize_model(empty, BnbQuantizationConfig(load_in_8bit=True),
                                weights_location=checkpoint, device_map="everywhere")
    # too little room: quantised layers would land on disk, where they cannot run
    with init_empty_weights():
        empty = Net()
    with pytest.raises(ConfigurationError, match=r"offloads quantised layers \['body.0', "
                                                 r"'body.2'\].*raise max_memory"):
        load_and_quantize_model(empty, BnbQuantizationConfig(load_in_8bit=True),
                                weights_location=checkpoint, device_map="sequential",
                                max_memory={"cpu": "1KB"})


def test_get_quantized_model_device_map_plans_as_load_and_quantize_model_does():
    from accel_inference.quantize import get_quantized_model_device_map

    config = BnbQuantizationConfig(load_in_8bit=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    whole = get_quantized_model_device_map(model, config)
    assert list(whole) == [""]  # everything on the GPU, or the CPU without one
    assert get_quantized_model_device_map(model, config, {"0": "cpu", "1": "cpu"}) == \
        {"0": "cpu", "1": "cpu"}
    auto = get_quantized_model_device_map(model, config, "sequential", max_memory={"cpu": 10**6})
    assert set(auto.values()) == {"cpu"}
    with pytest.raises(ConfigurationError, match="device_map='everywhere' is not known"):
        get_quantized_model_device_map(model, config, "everywhere")


def test_quantize_and_offload_8bit_is_refused_with_the_reason():
    from accel_inference.quantize import quantize_and_offload_8bit

    with pytest.raises(ConfigurationError, match="does not offload quantised layers"):
        quantize_and_offload_8bit(torch.nn.Linear(2, 2), None, "0.weight", torch.int8,
                                  "offload", {}, None)

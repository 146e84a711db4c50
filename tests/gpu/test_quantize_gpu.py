"""bitsandbytes quantisation on a CUDA device (Accelerate's main path for it): a loaded model
quantised in place, an empty one loaded quantised from a checkpoint with a device map over
the GPU and the CPU, and an "auto" map that would strand quantised layers off the GPU.
Needs CUDA and bitsandbytes (``accel[bnb]``)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
              pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                                 reason='needs bitsandbytes (pip install "accel[bnb]")')]

IDS = torch.tensor([[1, 4, 7, 19, 0, 3, 8, 2]])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 256)
        self.body = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
        self.norm = nn.LayerNorm(256)
        self.lm_head = nn.Linear(256, 20)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.body(self.embed(ids))))


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


@pytest.mark.parametrize("bits", [8, 4])
def test_a_loaded_model_is_quantised_onto_the_gpu(bits):
    import bitsandbytes as bnb
    from accel_inference.quantize import (
        BnbQuantizationConfig,
        has_4bit_bnb_layers,
        load_and_quantize_model,
    )

    expected = _net()(IDS).float()
    config = (BnbQuantizationConfig(load_in_8bit=True) if bits == 8 else
              BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_compute_dtype="bf16"))
    model = load_and_quantize_model(_net(), config)
    layer = model.body[0]
    assert isinstance(layer, bnb.nn.Linear8bitLt if bits == 8 else bnb.nn.Linear4bit)
    assert layer.weight.device.type == "cuda" and layer.weight.dtype in (torch.int8, torch.uint8)
    assert has_4bit_bnb_layers(model) is (bits == 4)
    with torch.no_grad():
        got = model(IDS.cuda()).float().cpu()
    assert (got - expected).abs().max() < {8: 0.1, 4: 0.5}[bits]


def test_an_empty_model_loads_quantised_over_gpu_and_cpu(tmp_path):
    import bitsandbytes as bnb
    from accel_inference import init_empty_weights
    from accel_inference.quantize import BnbQuantizationConfig, load_and_quantize_model
    from accel_state import ConfigurationError
    from safetensors.torch import save_file

    reference = _net()
    expected = reference(IDS)
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="fp32")
    with init_empty_weights():
        empty = Net()
    device_map = {"embed": 0, "body.0": 0, "body.1": 0, "body.2": "cpu", "norm": 0,
                  "lm_head": 0}
    model = load_and_quantize_model(empty, config, weights_location=tmp_path / "model.safetensors",
                                    device_map=device_map)
    assert isinstance(model.body[0], bnb.nn.Linear4bit)
    assert model.body[0].weight.device.type == "cuda"
    assert type(model.body[2]) is nn.Linear  # offloaded to the CPU: left unquantised
    with torch.no_grad():
        assert (model(IDS).float().cpu() - expected).abs().max() < 0.5
    with init_empty_weights():
        empty = Net()
    with pytest.raises(ConfigurationError, match="offloads quantised layers"):
        load_and_quantize_model(empty, BnbQuantizationConfig(load_in_8bit=True),
                                weights_location=tmp_path / "model.safetensors",
                                device_map="sequential", max_memory={0: "100KB", "cpu": "1GiB"})

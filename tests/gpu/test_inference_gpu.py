"""Big-model inference on one CUDA device: a device map over GPU, CPU and disk, weights
read from safetensors straight to the GPU, whole-model offload chains. Needs CUDA."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(8)))


def test_dispatch_over_gpu_cpu_and_disk_matches_the_plain_model(tmp_path):
    from accel_checkpoint.weights import save_model_weights
    from accel_inference import init_empty_weights, load_checkpoint_and_dispatch

    reference = _model()
    x = torch.randn(4, 256)
    expected = reference(x)
    save_model_weights(reference.state_dict(), tmp_path / "ckpt")
    with init_empty_weights():
        empty = _model()
    device_map = {"0": 0, "1": 0, "2": "cpu", "3": "cpu", "4": "disk", "5": "disk", "6": 0,
                  "7": "cpu"}
    model = load_checkpoint_and_dispatch(empty, tmp_path / "ckpt", device_map=device_map,
                                         offload_folder=tmp_path / "off")
    assert model[0][0].weight.device.type == "cuda"  # read straight to the GPU
    assert model[2][0].weight.is_meta and model[4][0].weight.is_meta  # offloaded
    for _ in range(2):
        out = model(x)
        assert out.device.type == "cpu"  # io_same_device on the root
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    auto = load_checkpoint_and_dispatch(_empty_model(), tmp_path / "ckpt", device_map="auto",
                                        # blocks of 263 kB; GPU 0 and the CPU keep one
                                        # free: 2 blocks each, the other 4 on disk
                                        max_memory={0: "800KB", "cpu": "800KB"},
                                        offload_folder=tmp_path / "off2")
    assert {0, "cpu", "disk"} <= set(auto.hf_device_map.values())
    torch.testing.assert_close(auto(x), expected, rtol=1e-4, atol=1e-5)


def _empty_model() -> nn.Sequential:
    from accel_inference import init_empty_weights

    with init_empty_weights():
        return _model()


def test_cpu_offload_with_hook_moves_models_to_the_gpu_in_turn():
    from accel_inference import cpu_offload_with_hook

    first, second = _model(), _model()
    first, hook1 = cpu_offload_with_hook(first, execution_device="cuda:0")
    second, hook2 = cpu_offload_with_hook(second, execution_device="cuda:0",
                                          prev_module_hook=hook1)
    x = torch.randn(2, 256)
    out = first(x)
    assert out.device.type == "cuda" and next(first.parameters()).is_cuda
    second(out)
    assert not next(first.parameters()).is_cuda and next(second.parameters()).is_cuda
    hook2.offload()
    assert not next(second.parameters()).is_cuda


def test_cpu_offload_streams_weights_to_the_gpu():
    from accel_inference import cpu_offload

    reference = _model()
    x = torch.randn(4, 256)
    expected = reference(x)
    model = cpu_offload(_model(), execution_device="cuda:0", prefetch=True)
    assert model[0][0].weight.is_meta
    for _ in range(2):
        torch.testing.assert_close(model(x).cpu(), expected, rtol=1e-4, atol=1e-5)

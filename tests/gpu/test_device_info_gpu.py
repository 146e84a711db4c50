"""The GPU branches of the Accelerate-compat helpers on a real CUDA machine: nvidia-smi
queries, fp8 capability, NUMA pinning, fp8 layerwise storage, autocast on cuda. Needs CUDA."""

from __future__ import annotations

import os

import pytest
import torch
from accel_state import DistributedType, device_info

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_gpu_facts_match_torch():
    names, count = device_info.get_gpu_info()
    assert count >= torch.cuda.device_count() >= 1 and len(names) == count
    assert torch.cuda.get_device_name(0) in names
    assert device_info.get_driver_version()[0].isdigit()
    assert device_info.get_current_device_type() == ("cuda", DistributedType.MULTI_GPU)
    assert isinstance(device_info.check_cuda_p2p_ib_support(), bool)
    capability = torch.cuda.get_device_capability()
    assert device_info.check_cuda_fp8_capability() is (capability >= (8, 9))


def test_numa_affinity_pins_to_the_gpu_cores():
    pytest.importorskip("pynvml")
    before = os.sched_getaffinity(0)
    try:
        device_info.override_numa_affinity(0)
        assert os.sched_getaffinity(0) and os.sched_getaffinity(0) <= set(range(os.cpu_count()))
    finally:
        os.sched_setaffinity(0, before)


def test_fp8_storage_layerwise_casting_on_cuda():
    from accel_inference.layerwise import attach_layerwise_casting_hooks

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)).cuda()
    x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    attach_layerwise_casting_hooks(model, torch.float8_e4m3fn, torch.bfloat16,
                                   skip_modules_classes=[torch.nn.LayerNorm])
    model[1].to(torch.bfloat16)
    assert model[0].weight.dtype is torch.float8_e4m3fn
    out = model(x)
    assert out.dtype is torch.bfloat16 and torch.isfinite(out).all()
    assert model[0].weight.dtype is torch.float8_e4m3fn


def test_mixed_precision_context_on_cuda():
    from accel import Accelerator
    from accel.utils import get_mixed_precision_context_manager

    Accelerator(mixed_precision="fp16")
    a = torch.randn(4, 4, device="cuda")
    with get_mixed_precision_context_manager(native_amp=True):
        assert (a @ a).dtype is torch.float16

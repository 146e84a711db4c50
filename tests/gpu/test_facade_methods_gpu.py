"""Accelerator.profile() on one CUDA device: the Chrome trace holds the GPU kernels. Needs CUDA."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_profile_traces_cuda_kernels(tmp_path):
    from accel import Accelerator, ProfileKwargs

    accelerator = Accelerator(kwargs_handlers=[ProfileKwargs(
        activities=["cpu", "cuda"], output_trace_dir=tmp_path)])
    assert accelerator.device.type == "cuda" and accelerator.multi_device is False
    model = accelerator.prepare(nn.Linear(256, 256))
    with accelerator.profile() as profiler:
        for _ in range(3):
            model(torch.randn(64, 256, device="cuda")).sum().backward()
        torch.cuda.synchronize()
    assert profiler.key_averages()
    events = json.loads((tmp_path / "profile_0.json").read_text())["traceEvents"]
    assert any(event.get("cat") == "kernel" for event in events), "no CUDA kernel traced"

"""The Accelerator on one CUDA device: placement, a training step, collectives. Needs CUDA."""

from __future__ import annotations

import pytest
import torch
from accel_state import DistributedType
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_accelerator_places_model_and_batches_on_cuda():
    from accel import Accelerator

    accelerator = Accelerator()
    assert accelerator.device.type == "cuda"
    assert accelerator.distributed_type is DistributedType.NO
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert next(model.parameters()).device.type == "cuda"
    before = model.weight.detach().clone()
    for x, y in loader:
        assert x.device.type == "cuda" and y.device.type == "cuda"
        optimizer.zero_grad()
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
    assert not torch.equal(before, model.weight)
    assert accelerator.gather(torch.ones(2, device="cuda")).device.type == "cuda"


def test_cpu_flag_keeps_everything_on_cpu_even_with_cuda():
    from accel import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(2, 2))
    assert accelerator.device.type == "cpu" and next(model.parameters()).device.type == "cpu"

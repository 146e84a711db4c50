"""torch.compile with inductor on one CUDA device: whole-model and regional compilation
train like eager, in bf16 too. Needs CUDA (inductor's GPU kernels are Triton)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


class _Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.GELU())
                                    for _ in range(4))
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def _train(**accelerator_kwargs):
    from accel import Accelerator

    torch._dynamo.reset()
    torch.manual_seed(0)
    accelerator = Accelerator(**accelerator_kwargs)
    model = _Blocks()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(32, 64, generator=data).to(accelerator.device)
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    return accelerator, model


@pytest.mark.parametrize("mixed_precision", ["no", "bf16"])
def test_inductor_whole_and_regional_train_like_eager(mixed_precision):
    from accel.utils import TorchDynamoPlugin, has_compiled_regions, is_compiled_module

    _, eager = _train(mixed_precision=mixed_precision)
    accelerator, whole = _train(mixed_precision=mixed_precision, dynamo_backend="inductor")
    assert is_compiled_module(whole)
    plugin = TorchDynamoPlugin(backend="inductor", use_regional_compilation=True)
    _, regional = _train(mixed_precision=mixed_precision, dynamo_plugin=plugin)
    assert has_compiled_regions(regional) and not is_compiled_module(regional)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if mixed_precision == "bf16" else {}
    def cpu(state):
        return {name: tensor.float().cpu() for name, tensor in state.items()}

    reference = cpu(eager.state_dict())
    torch.testing.assert_close(cpu(accelerator.get_state_dict(whole)), reference, **tolerance)
    torch.testing.assert_close(cpu(regional.state_dict()), reference, **tolerance)

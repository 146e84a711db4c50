"""Mixed precision on one CUDA device: fp16 + GradScaler, bf16, fp8 (torchao, TE). Needs CUDA."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 16))


def _hook(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    return seen


def _train(accelerator, model, steps: int = 20) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(256, 64, device="cuda", generator=generator)
    y = torch.randn(256, 16, device="cuda", generator=generator)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_fp16_on_cuda_autocasts_scales_and_skips_inf_steps():
    from accel import Accelerator, GradScalerKwargs

    accelerator = Accelerator(mixed_precision="fp16",
                              kwargs_handlers=[GradScalerKwargs(init_scale=2.0 ** 10)])
    assert accelerator.device.type == "cuda" and accelerator.scaler is not None
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    seen = _hook(model)
    out = model(torch.randn(8, 64, device="cuda"))
    assert seen == [torch.float16] and out.dtype == torch.float32
    accelerator.backward(out.pow(2).mean())
    before = model[0].weight.detach().clone()
    model[0].weight.grad[0, 0] = float("inf")
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped and torch.equal(before, model[0].weight)
    assert accelerator.scaler.get_scale() == 2.0 ** 9
    losses = _train(Accelerator(mixed_precision="fp16"), _model())
    assert losses[-1] < losses[0]


def test_bf16_on_cuda_trains():
    from accel import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    model = _model()
    seen = _hook(model)
    losses = _train(accelerator, model)
    assert seen[0] == torch.bfloat16 and losses[-1] < losses[0]


def test_fp8_torchao_on_cuda_trains():
    pytest.importorskip("torchao.float8")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 matmuls need compute capability 8.9+ (Ada/Hopper)")
    from accel import Accelerator
    from accel.utils import AORecipeKwargs

    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    model = _model()
    losses = _train(accelerator, model)
    assert type(model[2]).__name__ == "Float8Linear" and type(model[0]) is nn.Linear
    assert losses[-1] < losses[0]


def test_fp8_transformer_engine_on_cuda_trains():
    pytest.importorskip("transformer_engine.pytorch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 matmuls need compute capability 8.9+ (Ada/Hopper)")
    from accel import Accelerator
    from accel.utils import TERecipeKwargs, has_transformer_engine_layers

    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()])
    model = _model()
    weight = model[2].weight
    losses = _train(accelerator, model)
    assert has_transformer_engine_layers(model) and model[2].weight is weight
    assert losses[-1] < losses[0]

"""Mixed precision through the Accelerator on CPU: bf16, fp16 loss scaling, fp8 (torchao)."""

from __future__ import annotations

import copy

import pytest
import torch
from accel import Accelerator, AutocastKwargs, GradScalerKwargs
from accel.utils import AORecipeKwargs, FP8BackendType, TERecipeKwargs
from accel_state import ConfigurationError
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def _hook(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    return seen


def test_bf16_prepared_model_autocasts_returns_fp32_and_unwraps():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    assert (accelerator.mixed_precision, accelerator.native_amp) == ("bf16", True)
    assert accelerator.scaler is None and accelerator.fp8_backend is FP8BackendType.NO
    model = _model()
    original = model.forward
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    seen = _hook(model)
    out = model(torch.randn(4, 8))
    assert seen == [torch.bfloat16] and out.dtype == torch.float32
    accelerator.backward(out.sum())
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    optimizer.step()
    assert not optimizer.step_was_skipped and not accelerator.optimizer_step_was_skipped
    copy.deepcopy(model)(torch.randn(1, 8))
    assert accelerator.unwrap_model(model) is model and model._original_forward == original
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert plain.forward == original and not hasattr(plain, "_original_forward")
    seen.clear()
    plain(torch.randn(1, 8))
    assert seen == [torch.float32]


def test_bf16_wraps_the_module_inside_torch_compile():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    inner = _model()
    seen = _hook(inner)
    compiled = accelerator.prepare(torch.compile(inner, backend="eager"))
    out = compiled(torch.randn(2, 8))
    assert seen == [torch.bfloat16] and out.dtype == torch.float32
    assert hasattr(inner, "_original_forward")
    unwrapped = accelerator.unwrap_model(compiled, keep_fp32_wrapper=False)
    assert unwrapped is compiled and not hasattr(inner, "_original_forward")
    seen.clear()
    compiled(torch.randn(2, 8))
    assert seen == [torch.float32]


def test_bf16_training_tracks_the_fp32_run():
    data = TensorDataset(torch.randn(64, 8, generator=torch.Generator().manual_seed(3)),
                         torch.randn(64, 4, generator=torch.Generator().manual_seed(4)))

    def train(mixed_precision: str) -> list[float]:
        accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                       DataLoader(data, batch_size=16))
        losses = []
        for _ in range(4):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                losses.append(loss.item())
        return losses

    full, half = train("no"), train("bf16")
    assert half[-4] < half[0]  # the same batch, three epochs later
    assert half == pytest.approx(full, rel=0.05, abs=0.02)


def test_autocast_context_manager_and_handler():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    with accelerator.autocast():
        assert torch.is_autocast_enabled("cpu")
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with accelerator.autocast(AutocastKwargs(enabled=False)):
        assert not torch.is_autocast_enabled("cpu")
    with Accelerator(cpu=True).autocast():
        assert not torch.is_autocast_enabled("cpu")


def test_autocast_kwargs_handler_reaches_prepared_models():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16",
                              kwargs_handlers=[AutocastKwargs(enabled=False)])
    model = accelerator.prepare(_model())
    seen = _hook(model)
    model(torch.randn(1, 8))
    assert seen == [torch.float32]


def test_fp16_inf_gradient_skips_step_lowers_scale_and_holds_the_scheduler():
    accelerator = Accelerator(cpu=True, mixed_precision="fp16",
                              kwargs_handlers=[GradScalerKwargs(init_scale=2.0 ** 10)])
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    assert optimizer.scaler is accelerator.scaler
    seen = _hook(model)
    accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())
    assert seen == [torch.float16]
    before = model[0].weight.detach().clone()
    model[0].weight.grad[0, 0] = float("inf")
    optimizer.step()
    scheduler.step()
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert torch.equal(before, model[0].weight)
    assert accelerator.scaler.get_scale() == 2.0 ** 9
    assert scheduler.get_last_lr() == [0.1]  # a skipped step does not advance the schedule
    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())
    optimizer.step()
    scheduler.step()
    assert not accelerator.optimizer_step_was_skipped
    assert not torch.equal(before, model[0].weight) and scheduler.get_last_lr() == [0.05]


def test_fp16_clipping_sees_true_scale_gradients():
    x = torch.randn(4, 8)
    reference = _model()
    nn.functional.mse_loss(reference(x), torch.zeros(4, 4)).backward()
    true_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 1e9)

    accelerator = Accelerator(cpu=True, mixed_precision="fp16",
                              kwargs_handlers=[GradScalerKwargs(init_scale=2.0 ** 12)])
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(nn.functional.mse_loss(model(x), torch.zeros(4, 4)))
    norm = accelerator.clip_grad_norm_(model.parameters(), 1e9)
    torch.testing.assert_close(norm, true_norm, rtol=2e-2, atol=1e-3)  # not 4096x too big
    accelerator.clip_grad_value_(model.parameters(), 1e9)  # already unscaled: no double division
    torch.testing.assert_close(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9), norm)
    optimizer.step()
    assert not optimizer.step_was_skipped


def test_unscale_and_clip_are_plain_without_loss_scaling():
    accelerator = Accelerator(cpu=True)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(2, 8)).sum())
    grads = [p.grad.clone() for p in model.parameters()]
    accelerator.unscale_gradients()
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))
    assert accelerator.clip_grad_norm_(model.parameters(), 1e-3) > 1e-3
    assert optimizer._strategy is accelerator.strategy  # the strategy takes the step
    optimizer.step()
    assert not optimizer.step_was_skipped


def test_precision_handlers_are_sorted_into_slots():
    with pytest.raises(ConfigurationError, match="more than one GradScalerKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[GradScalerKwargs(), GradScalerKwargs()])
    with pytest.raises(ConfigurationError, match="needs a CUDA GPU"):
        Accelerator(cpu=True, mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()])


def test_unknown_mixed_precision_lists_the_valid_values():
    with pytest.raises(ConfigurationError, match="Available: bf16, fp16, fp8, no"):
        Accelerator(cpu=True, mixed_precision="float16")


def test_fp8_with_torchao_converts_and_trains():
    pytest.importorskip("torchao.float8")
    accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwargs_handlers=[
        AORecipeKwargs(module_filter_func=lambda module, fqn: fqn == "1")])
    assert accelerator.fp8_backend is FP8BackendType.AO
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert type(model[1]).__name__ == "Float8Linear" and type(model[0]) is nn.Linear
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]

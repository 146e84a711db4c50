"""bf16 and fp16 on CPU, for real: autocast dtypes, fp32 masters, loss scaling and skipped steps."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from accel_precision import (
    BF16Precision,
    FP16Precision,
    GradScalerKwargs,
    NoPrecision,
    Precision,
    check_autocast,
    step_with_scaler,
)
from accel_state import ConfigurationError
from torch import nn


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def _record_dtypes(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    return seen


def test_no_precision_hooks_are_no_ops():
    precision = NoPrecision()
    model = _mlp()
    forward = model.forward
    assert precision.wrap_forward(precision.convert_module(model)) is model
    assert model.forward == forward and not hasattr(model, "_original_forward")
    loss = model(torch.randn(2, 8)).sum()
    assert precision.pre_backward(loss) is loss
    assert not precision.native_amp and precision.scaler is None
    assert precision.param_dtype is None and precision.reduce_dtype is None
    assert precision.state_dict() == {}
    assert not precision.overrides("optimizer_step")
    assert FP16Precision(device="cpu").overrides("optimizer_step")


def test_bf16_runs_matmuls_in_bf16_with_fp32_outputs_and_fp32_gradients():
    precision = BF16Precision(device="cpu")
    model = precision.wrap_forward(_mlp())
    seen = _record_dtypes(model)
    out = model(torch.randn(4, 8))
    assert seen == [torch.bfloat16]  # the intermediate ran in bf16
    assert out.dtype == torch.float32  # outputs come back fp32
    out.sum().backward()
    for param in model.parameters():
        assert param.dtype == torch.float32 and param.grad.dtype == torch.float32
    assert (precision.param_dtype, precision.reduce_dtype) == (torch.bfloat16, torch.float32)


def test_bf16_training_tracks_the_fp32_run():
    x, y = torch.randn(64, 8, generator=torch.Generator().manual_seed(1)), torch.randn(64, 4)

    def train(precision: Precision) -> tuple[list[float], nn.Module]:
        model = precision.wrap_forward(_mlp())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(8):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            precision.backward(loss)
            precision.optimizer_step(optimizer)
            losses.append(loss.item())
        return losses, model

    full, full_model = train(NoPrecision())
    half, half_model = train(BF16Precision(device="cpu"))
    assert half[-1] < half[0]
    assert half == pytest.approx(full, rel=0.05, abs=0.02)
    for a, b in zip(full_model.parameters(), half_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.02)


def test_autocast_kwargs_disable_autocast_in_forward():
    from accel_precision import AutocastKwargs

    precision = BF16Precision(device="cpu", autocast_kwargs=AutocastKwargs(enabled=False))
    model = precision.wrap_forward(_mlp())
    seen = _record_dtypes(model)
    model(torch.randn(2, 8))
    assert seen == [torch.float32]
    with precision.forward_context(AutocastKwargs(enabled=True)):
        assert torch.is_autocast_enabled("cpu")


def test_wrapped_model_pickles_deep_copies_and_unwraps():
    model = BF16Precision(device="cpu").wrap_forward(_mlp())
    clone = pickle.loads(pickle.dumps(model))
    x = torch.randn(2, 8)
    torch.testing.assert_close(clone(x), model(x))
    assert copy.deepcopy(model)(x).dtype == torch.float32
    model.forward = model._original_forward  # what unwrap_model(keep_fp32_wrapper=False) does
    seen = _record_dtypes(model)
    model(x)
    assert seen == [torch.float32]


def _fp16_setup(**scaler_options):
    precision = FP16Precision(device="cpu", scaler_kwargs=GradScalerKwargs(**scaler_options))
    model = precision.wrap_forward(_mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return precision, model, optimizer


def test_fp16_inf_gradient_skips_the_step_and_lowers_the_scale():
    precision, model, optimizer = _fp16_setup(init_scale=1024.0)
    seen = _record_dtypes(model)
    loss = model(torch.randn(4, 8)).pow(2).mean()
    assert seen == [torch.float16]
    precision.backward(loss)
    before = [p.detach().clone() for p in model.parameters()]
    model[0].weight.grad[0, 0] = float("inf")
    assert precision.optimizer_step(optimizer) is False
    for old, new in zip(before, model.parameters(), strict=True):
        assert torch.equal(old, new)  # nothing moved
    assert precision.scaler.get_scale() == 512.0
    # the next, finite step goes through at the lower scale
    optimizer.zero_grad()
    precision.backward(model(torch.randn(4, 8)).pow(2).mean())
    assert precision.optimizer_step(optimizer) is True
    assert not torch.equal(before[0], model[0].weight)
    assert precision.state_dict()["scale"] == 512.0


def test_fp16_scaled_gradients_unscale_once_to_the_true_gradient():
    precision, model, optimizer = _fp16_setup(init_scale=256.0)
    x = torch.randn(4, 8)
    reference = copy.deepcopy(model)
    reference.forward = reference._original_forward
    precision.backward(model(x).float().sum())
    assert precision.scaler.get_scale() == 256.0
    with torch.autocast("cpu", dtype=torch.float16):
        ref_out = reference(x)
    ref_out.float().sum().backward()
    precision.unscale_(optimizer)
    precision.unscale_(optimizer)  # a second call is harmless (torch alone would raise)
    torch.testing.assert_close(model[2].weight.grad, reference[2].weight.grad, rtol=1e-2, atol=1e-3)
    assert precision.optimizer_step(optimizer) is True


def test_fp16_two_optimizers_share_one_scaler_update_per_iteration():
    precision, model, _ = _fp16_setup(init_scale=64.0, growth_interval=1)
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    second = torch.optim.SGD(model[2].parameters(), lr=0.1)
    precision.backward(model(torch.randn(4, 8)).sum())
    precision.unscale_(first)
    precision.unscale_(second)  # e.g. clipping every model before stepping
    assert precision.optimizer_step(first) and precision.optimizer_step(second)
    assert precision.scaler.get_scale() == 128.0  # grew once, not twice


def test_fp16_scaler_state_round_trips():
    precision, _, _ = _fp16_setup(init_scale=8.0)
    other, _, _ = _fp16_setup()
    other.load_state_dict(precision.state_dict())
    assert other.scaler.get_scale() == 8.0


def test_fp16_without_scaler_trains_unscaled():
    precision, model, optimizer = _fp16_setup(enabled=False)
    assert precision.scaler is None and precision.native_amp
    loss = model(torch.randn(2, 8)).sum()
    assert precision.pre_backward(loss) is loss
    precision.backward(loss)
    assert precision.optimizer_step(optimizer) is True


def test_step_with_a_plain_scaler_reports_skips_and_restores_step():
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    assert "step" not in vars(optimizer)
    assert step_with_scaler(scaler, optimizer) is True
    assert "step" not in vars(optimizer)
    scaler.update()
    optimizer.zero_grad()
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    model.weight.grad[0, 0] = float("nan")
    assert step_with_scaler(scaler, optimizer) is False


def test_a_device_without_autocast_is_an_error_not_silent_fp32():
    with pytest.raises(ConfigurationError, match="cannot run on device 'meta'.*silently stay fp32"):
        check_autocast(torch.device("meta"), torch.float16)
    with pytest.raises(ConfigurationError, match="'fp16'"):
        FP16Precision(device="meta")


@pytest.mark.parametrize("options, match", [
    ({"init_scale": 0}, "init_scale"),
    ({"growth_factor": 1.0}, "growth_factor"),
    ({"backoff_factor": 1.5}, "backoff_factor"),
    ({"growth_interval": 0}, "growth_interval"),
    ({"enabled": "yes"}, "enabled"),
])
def test_grad_scaler_kwargs_are_validated(options, match):
    with pytest.raises(ConfigurationError, match=match):
        GradScalerKwargs(**options)


def test_fp16_sharded_scaler_keeps_the_scale_reached_and_its_options():
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    precision = FP16Precision(device="cpu", scaler_kwargs=GradScalerKwargs(init_scale=2.0**10,
                                                                           growth_interval=7))
    precision.load_state_dict({**precision.state_dict(), "scale": 96.0})
    precision.use_sharded_scaler()
    assert isinstance(precision.scaler, ShardedGradScaler)
    assert precision.scaler.get_scale() == 96.0
    assert precision.scaler.get_growth_interval() == 7
    bare = FP16Precision(device="cpu", scaler_kwargs=GradScalerKwargs(enabled=False))
    bare.use_sharded_scaler()  # no loss scaling: nothing to share
    assert bare.scaler is None

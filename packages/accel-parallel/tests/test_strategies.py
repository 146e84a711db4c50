"""Strategies, the registry, DDP options and unwrapping (DDP itself on a 1-process gloo group)."""

from __future__ import annotations

import warnings

import pytest
import torch
from accel_parallel import (
    STRATEGIES,
    DDPCommunicationHookType,
    DDPStrategy,
    DistributedDataParallelKwargs,
    SingleDeviceStrategy,
    Strategy,
    extract_model_from_parallel,
)
from accel_state import ConfigurationError


def test_builtins_register_through_entry_points():
    assert STRATEGIES.get("single") is SingleDeviceStrategy
    assert STRATEGIES.get("DDP") is DDPStrategy
    with pytest.raises(ConfigurationError, match="Did you mean 'ddp'"):
        STRATEGIES.get("dpp")


def test_single_device_moves_without_wrapping(state):
    strategy = SingleDeviceStrategy(state)
    model = torch.nn.Linear(2, 2)
    assert strategy.prepare_model(model) is model
    assert strategy.unwrap_model(model) is model
    with strategy.no_sync(model):
        pass
    loss = model(torch.ones(1, 2)).sum()
    strategy.backward(loss)
    assert model.weight.grad is not None
    assert "SingleDeviceStrategy" in repr(strategy)


def test_ddp_wraps_unwraps_and_no_sync(state, gloo_group):
    kwargs = DistributedDataParallelKwargs(broadcast_buffers=False)
    strategy = DDPStrategy(state, ddp_kwargs=kwargs)
    model = torch.nn.Linear(2, 2)
    with warnings.catch_warnings():  # Accelerate's field, without torch's deprecation notice
        warnings.simplefilter("error", FutureWarning)
        wrapped = strategy.prepare_model(model)
    assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
    assert wrapped.broadcast_buffers is False
    assert strategy.unwrap_model(wrapped) is model
    assert extract_model_from_parallel(wrapped) is model
    with strategy.no_sync(wrapped):
        assert wrapped.require_backward_grad_sync is False
    assert wrapped.require_backward_grad_sync is True
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    assert strategy.prepare_model(frozen) is frozen  # nothing to synchronise
    assert strategy.prepare_model(torch.nn.Linear(2, 2), evaluation_mode=True).__class__ is torch.nn.Linear


def test_ddp_comm_hook_is_registered(state, gloo_group):
    kwargs = DistributedDataParallelKwargs(comm_hook="fp16")
    wrapped = DDPStrategy(state, ddp_kwargs=kwargs).prepare_model(torch.nn.Linear(4, 4))
    wrapped(torch.ones(2, 4)).sum().backward()  # the fp16 compression hook runs in backward
    assert wrapped.module.weight.grad is not None


def test_ddp_kwargs_only_pass_changed_constructor_fields():
    kwargs = DistributedDataParallelKwargs(find_unused_parameters=True,
                                           comm_hook=DDPCommunicationHookType.BF16)
    assert kwargs.ddp_arguments() == {"find_unused_parameters": True}
    with pytest.raises(ConfigurationError, match="comm_wrapper='zip'"):
        DistributedDataParallelKwargs(comm_wrapper="zip")


def test_extract_model_handles_compile_and_fp32_wrapper():
    model = torch.nn.Linear(2, 2)
    original = model.forward
    model._original_forward = original
    model.forward = lambda x: original(x).float()
    compiled = torch.compile(model, backend="eager")
    assert extract_model_from_parallel(compiled) is compiled
    assert extract_model_from_parallel(compiled, keep_torch_compile=False) is model
    unwrapped = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    assert unwrapped.forward == original and not hasattr(unwrapped, "_original_forward")


def test_strategy_base_is_usable_as_a_template(state):
    class Custom(Strategy):
        name = "custom"

    STRATEGIES.register("custom-test", Custom)
    try:
        assert STRATEGIES.get("custom-test") is Custom
    finally:
        STRATEGIES._clear()

"""Accelerate's DeepSpeed helper names over a recording engine, and model_has_dtensor."""

from __future__ import annotations

import types

import pytest
import torch
from accel_parallel.deepspeed.compat import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    get_active_deepspeed_plugin,
    map_pytorch_optim_to_deepspeed,
)
from accel_parallel.dtensor_utils import model_has_dtensor
from accel_state import ConfigurationError, DistributedType


class RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        self.calls.append(("boundary", is_boundary))

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        self.calls.append(("backward", float(loss.detach()), kwargs))
        loss.backward()

    def step(self) -> None:
        self.calls.append(("step",))

    def get_global_grad_norm(self) -> torch.Tensor:
        return torch.tensor(2.5)


def test_engine_wrapper_steps_only_at_the_accumulation_boundary():
    engine = RecordingEngine()
    wrapper = DeepSpeedEngineWrapper(engine)
    weight = torch.ones(2, requires_grad=True)
    wrapper.backward((weight * 3).sum(), sync_gradients=False, retain_graph=True)
    assert engine.calls == [("boundary", False), ("backward", 6.0, {"retain_graph": True})]
    wrapper.backward((weight * 3).sum())
    assert engine.calls[2:] == [("boundary", True), ("backward", 6.0, {}), ("step",)]
    assert torch.equal(weight.grad, torch.full((2,), 6.0))
    assert wrapper.get_global_grad_norm() == 2.5


def test_optimizer_wrapper_leaves_stepping_to_the_engine():
    param = torch.nn.Parameter(torch.ones(2))
    inner = torch.optim.SGD([param], lr=1.0)
    wrapper = DeepSpeedOptimizerWrapper(inner)
    param.grad = torch.ones(2)
    wrapper.step()
    wrapper.zero_grad()
    assert torch.equal(param.data, torch.ones(2)) and param.grad is not None
    assert wrapper.param_groups is inner.param_groups and wrapper.step_was_skipped is False
    inner.overflow = True  # what DeepSpeed's fp16 optimizer sets on a skipped step
    assert wrapper.step_was_skipped is True
    assert wrapper.state_dict()["param_groups"][0]["lr"] == 1.0


def test_active_plugin_comes_from_a_deepspeed_state_only():
    plugin = object()
    state = types.SimpleNamespace(distributed_type=DistributedType.DEEPSPEED,
                                  deepspeed_plugin=plugin)
    assert get_active_deepspeed_plugin(state) is plugin
    other = types.SimpleNamespace(distributed_type=DistributedType.MULTI_CPU, deepspeed_plugin=None)
    with pytest.raises(ConfigurationError, match="MULTI_CPU, not DEEPSPEED"):
        get_active_deepspeed_plugin(other)


def test_map_optimizer_refuses_types_deepspeed_has_no_cpu_kernel_for():
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(ConfigurationError, match="SGD.*Adam, AdamW and Adagrad"):
        map_pytorch_optim_to_deepspeed(sgd)


def test_map_optimizer_builds_deepspeed_cpu_adam_with_the_same_groups(monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.ops.adam as ds_adam

    built = {}

    class FakeCPUAdam:  # the real one compiles a C++ op (minutes); its arguments are the contract
        def __init__(self, params, **kwargs):
            built.update(params=params, **kwargs)

    monkeypatch.setattr(ds_adam, "DeepSpeedCPUAdam", FakeCPUAdam)
    params = [torch.nn.Parameter(torch.ones(1))]
    adamw = torch.optim.AdamW(params, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)
    assert isinstance(map_pytorch_optim_to_deepspeed(adamw), FakeCPUAdam)
    assert built["params"] is adamw.param_groups
    assert (built["lr"], built["betas"], built["eps"], built["weight_decay"],
            built["adamw_mode"]) == (0.01, (0.8, 0.9), 1e-6, 0.1, True)
    map_pytorch_optim_to_deepspeed(torch.optim.Adam(params, lr=0.02))
    assert built["adamw_mode"] is False and built["lr"] == 0.02


def test_model_has_dtensor(gloo_group):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate

    model = torch.nn.Linear(2, 2)
    assert model_has_dtensor(model) is False
    mesh = DeviceMesh("cpu", [0])
    model.weight = torch.nn.Parameter(DTensor.from_local(model.weight.data, mesh, [Replicate()]))
    assert model_has_dtensor(model) is True
    assert model_has_dtensor(types.SimpleNamespace(module=model)) is True  # a wrapper's .module


def test_compile_regions_deepspeed_compiles_the_engine_module_in_place():
    from accel_parallel.compile import has_compiled_regions
    from accel_parallel.deepspeed.compat import compile_regions_deepspeed

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    params = list(model.parameters())
    engine = types.SimpleNamespace(module=model)  # what DeepSpeed's engine exposes
    assert compile_regions_deepspeed(engine, backend="eager") is None
    assert has_compiled_regions(model) and list(model.parameters()) == params
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    with pytest.raises(ConfigurationError, match="needs an nn.Module"):
        compile_regions_deepspeed(types.SimpleNamespace(module="not a model"))

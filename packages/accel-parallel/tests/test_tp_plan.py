"""Tensor-parallel plans (transformers' form, the user's form), style names, plan errors,
and the gradient clipping across meshes — on a one-process gloo group (2-process TP runs:
tests/integration/test_tensor_parallel.py)."""

from __future__ import annotations

import types

import pytest
import torch
from accel_parallel.mesh.tensor_parallel import (
    ReplicateParallel,
    apply_tensor_parallel,
    clip_grad_norm_,
)
from accel_parallel.mesh.tp_plan import STYLE_NAMES, make_style, model_tp_plan, resolve_tp_plan
from accel_state import ConfigurationError
from torch import nn


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 8)
        self.down = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.relu(self.up(x))))


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class CausalLM(nn.Module):
    """transformers' layout: the base model under ``base_model_prefix``, its plan on config."""

    base_model_prefix = "model"

    def __init__(self) -> None:
        super().__init__()
        self.model = Base()
        self.head = nn.Linear(4, 2)
        self.config = types.SimpleNamespace(base_model_tp_plan={
            "layers.*.up": "colwise", "layers.*.down": "rowwise"})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.model(x))


def test_style_names_and_objects():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    for name in STYLE_NAMES:
        make_style(name)
    assert isinstance(make_style(" ColWise "), ColwiseParallel)
    assert isinstance(make_style("rowwise_rep"), RowwiseParallel)
    assert isinstance(make_style("replicate"), ReplicateParallel)
    given = ColwiseParallel()
    assert make_style(given) is given
    with pytest.raises(ConfigurationError) as error:
        make_style("local_colwise", "tp_plan['x']")
    message = str(error.value)
    assert "unknown tensor-parallel style 'local_colwise'" in message
    assert all(name in message for name in STYLE_NAMES)


def test_the_model_plan_comes_from_transformers_attributes():
    model = CausalLM()
    assert model_tp_plan(model) == {"model.layers.*.up": "colwise",
                                    "model.layers.*.down": "rowwise"}
    model._tp_plan = {"head": "colwise_rep"}
    assert model_tp_plan(model) == {"head": "colwise_rep"}  # the full plan wins
    assert model_tp_plan(nn.Linear(2, 2)) is None


def test_patterns_expand_to_modules_and_bad_plans_say_how_to_fix():
    model = CausalLM()
    resolved = resolve_tp_plan(model, None)
    assert sorted(resolved) == ["model.layers.0.down", "model.layers.0.up",
                                "model.layers.1.down", "model.layers.1.up"]
    with pytest.warns(UserWarning, match="no module matches 'lm_head'"):
        resolve_tp_plan(model, {"model.layers.*.norm": "sequence_parallel", "lm_head": "colwise"})
    with pytest.raises(ConfigurationError, match="matches no module of CausalLM.*model.layers"):
        resolve_tp_plan(model, {"layers.*.up": "colwise"})  # missing the model. prefix
    with pytest.raises(ConfigurationError, match="tp_size > 1 needs a tensor-parallel plan.*"
                                                 "TorchTensorParallelConfig\\(tp_plan="):
        resolve_tp_plan(nn.Sequential(nn.Linear(2, 2)), None)
    with pytest.raises(ConfigurationError, match="unknown tensor-parallel style 'diagonal'"):
        resolve_tp_plan(model, {"head": "diagonal"})


def test_apply_on_a_one_rank_mesh_keeps_the_function_and_clips_over_meshes(gloo_group):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    plain = CausalLM()
    torch.manual_seed(0)
    model = CausalLM()
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
    plan = {"model.layers.*.up": "colwise", "model.layers.*.down": "rowwise",
            "head": "replicate"}
    resolved = apply_tensor_parallel(model, mesh, plan)
    assert len(resolved) == 5
    assert isinstance(model.model.layers[0].up.weight, DTensor)
    assert isinstance(model.head.weight, DTensor)  # replicated on the mesh
    assert not isinstance(model.model.layers[0].norm.weight, DTensor)  # not in the plan
    x = torch.randn(3, 4)
    out = model(x)
    assert not isinstance(out, DTensor)
    torch.testing.assert_close(out, plain(x))
    out.pow(2).sum().backward()
    plain(x).pow(2).sum().backward()
    expected = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.1)
    norm = clip_grad_norm_(model.parameters(), 0.1)  # DTensor and plain grads together
    assert type(norm) is torch.Tensor
    torch.testing.assert_close(norm, expected)
    for (name, got), want in zip(model.named_parameters(), plain.parameters(), strict=True):
        grad = got.grad.full_tensor() if isinstance(got.grad, DTensor) else got.grad
        torch.testing.assert_close(grad, want.grad, msg=lambda m, n=name: f"{n}: {m}")
    inf = clip_grad_norm_(model.parameters(), 1e9, norm_type=float("inf"))
    torch.testing.assert_close(inf, max(p.grad.abs().max() for p in plain.parameters()))
    with pytest.raises(ConfigurationError, match="enable_async_tp=True\\) needs CUDA"):
        apply_tensor_parallel(CausalLM(), mesh, plan, enable_async_tp=True)

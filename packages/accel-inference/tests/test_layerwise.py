"""attach_layerwise_casting_hooks: low-precision storage, per-layer up-cast for compute."""

from __future__ import annotations

import pytest
import torch
from accel_inference.hooks import LayerwiseCastingHook
from accel_inference.layerwise import attach_layerwise_casting_hooks
from accel_state import ConfigurationError
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.conv = nn.Conv1d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x))


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), nn.Linear(8, 4))


def test_weights_stored_small_and_forward_computes_in_compute_dtype(monkeypatch):
    model = _model()
    x = torch.randn(3, 8)
    attach_layerwise_casting_hooks(model, torch.bfloat16, torch.float32)
    assert model[0].proj.weight.dtype is torch.bfloat16
    assert model[1].weight.dtype is torch.bfloat16
    assert model[0].conv.weight.dtype is torch.bfloat16
    assert model[0].norm.weight.dtype is torch.float32  # not a castable layer
    seen = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda i, w, b=None: seen.append(w.dtype) or linear(i, w, b))
    out = model(x)
    monkeypatch.undo()
    assert out.dtype is torch.float32 and seen == [torch.float32, torch.float32]
    assert model[1].weight.dtype is torch.bfloat16  # back to storage after the forward
    expected = _model()
    with torch.no_grad():  # the same weights, rounded through bf16 storage
        for layer in (expected[0].proj, expected[1]):
            for p in layer.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    assert torch.allclose(out, expected(x), atol=1e-5)


def test_skip_patterns_and_classes_leave_modules_alone():
    model = _model()
    attach_layerwise_casting_hooks(model, torch.bfloat16, torch.float32,
                                   skip_modules_pattern=r"^0\.proj$",
                                   skip_modules_classes=[nn.Conv1d])
    assert model[0].proj.weight.dtype is torch.float32
    assert not hasattr(model[0].proj, "_hf_hook")
    assert model[0].conv.weight.dtype is torch.float32
    assert isinstance(model[1]._hf_hook, LayerwiseCastingHook)
    skipped_all = _model()
    attach_layerwise_casting_hooks(skipped_all, torch.bfloat16, torch.float32,
                                   skip_modules_pattern=["^0$", "^1$"])
    assert all(p.dtype is torch.float32 for p in skipped_all.parameters())


def test_bad_arguments_are_errors():
    with pytest.raises(ConfigurationError, match="storage_dtype='fp8'"):
        attach_layerwise_casting_hooks(_model(), "fp8", torch.float32)
    with pytest.raises(ConfigurationError, match="not a valid regular expression"):
        attach_layerwise_casting_hooks(_model(), torch.bfloat16, torch.float32,
                                       skip_modules_pattern="(")

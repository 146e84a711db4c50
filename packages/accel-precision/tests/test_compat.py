"""Accelerate-named precision helpers: the torchao layer filter, the autocast factory,
Transformer Engine's forward wrapper and the refused MS-AMP recipe."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from accel_precision import AutocastKwargs
from accel_precision.compat import (
    MSAMPRecipeKwargs,
    apply_fp8_autowrap,
    autocast_context,
    filter_first_and_last_linear_layers,
)
from accel_state import ConfigurationError, MissingDependencyError


def test_filter_keeps_first_and_last_linear_of_the_module_given():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32),
                                torch.nn.Linear(32, 32))
    # a leaf Linear asked under its own name: 16-aligned and not its own first/last -> fp8
    assert filter_first_and_last_linear_layers(model[1], "1") is True
    # the names the filter keeps out are those found inside the module it is given
    assert filter_first_and_last_linear_layers(model[0], "") is False
    unaligned = torch.nn.Linear(10, 32)
    assert filter_first_and_last_linear_layers(unaligned, "x") is False  # not 16-aligned
    assert filter_first_and_last_linear_layers(torch.nn.ReLU(), "act") is False  # not a Linear


def test_autocast_context_casts_matmuls_to_the_precision_dtype():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast_context("bf16", "cpu", native_amp=True):
        assert (a @ b).dtype is torch.bfloat16
    with autocast_context("bf16", "cpu", native_amp=False):
        assert (a @ b).dtype is torch.float32
    with autocast_context("no", "cpu", native_amp=True):
        assert (a @ b).dtype is torch.float32
    with autocast_context("bf16", "cpu", native_amp=True,
                          autocast_kwargs=AutocastKwargs(enabled=False)):
        assert (a @ b).dtype is torch.float32


def test_autocast_context_rejects_bad_inputs():
    with pytest.raises(ConfigurationError, match="mixed_precision='fp4'"):
        autocast_context("fp4", "cpu", native_amp=True)
    with pytest.raises(ConfigurationError, match="must be an AutocastKwargs"):
        autocast_context("bf16", "cpu", native_amp=True, autocast_kwargs={"enabled": False})


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None,
                    reason="transformer-engine is installed")
def test_apply_fp8_autowrap_without_transformer_engine_names_the_install():
    model = torch.nn.Linear(16, 16)
    forward = model.forward
    with pytest.raises(MissingDependencyError, match="transformer-engine"):
        apply_fp8_autowrap(model)
    assert model.forward == forward  # left untouched


def test_msamp_recipe_is_refused_with_the_supported_alternatives():
    with pytest.raises(ConfigurationError, match="MS-AMP.*TERecipeKwargs.*AORecipeKwargs"):
        MSAMPRecipeKwargs(opt_level="O1")

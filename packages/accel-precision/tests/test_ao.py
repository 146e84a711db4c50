"""fp8 through torchao on CPU, for real: which layers convert, and training still learns."""

from __future__ import annotations

import pytest
import torch
from accel_precision import (
    AORecipeKwargs,
    TorchAOFP8Precision,
    build_precision,
    find_first_last_linear_layers,
    has_ao_layers,
)
from torch import nn

pytest.importorskip("torchao.float8")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 64),   # 0: first Linear -> stays high precision
        nn.ReLU(),
        nn.Linear(64, 64),   # 2: converted
        nn.ReLU(),
        nn.Linear(64, 48),   # 4: converted
        nn.ReLU(),
        nn.Linear(48, 24),   # 6: 24 is not a multiple of 16 -> stays
        nn.ReLU(),
        nn.Linear(24, 8),    # 8: last Linear -> stays
    )


def _kinds(model: nn.Module) -> dict[str, str]:
    return {name: type(m).__name__ for name, m in model.named_modules()
            if "Linear" in type(m).__name__}


def test_default_filter_keeps_first_last_and_unaligned_layers_high_precision():
    model = _model()
    assert find_first_last_linear_layers(model) == ("0", "8")
    params = [id(p) for p in model.parameters()]
    precision = build_precision("fp8", "cpu")
    assert isinstance(precision, TorchAOFP8Precision) and precision.fp8_backend == "AO"
    converted = precision.convert_module(model)
    assert _kinds(converted) == {"0": "Linear", "2": "Float8Linear", "4": "Float8Linear",
                                 "6": "Linear", "8": "Linear"}
    assert [id(p) for p in converted.parameters()] == params  # optimizers keep working
    assert has_ao_layers(converted) and precision.convert_module(converted) is converted


def test_fp8_training_runs_and_the_loss_decreases():
    recipe = AORecipeKwargs(module_filter_func=lambda module, fqn: fqn in ("2", "4"))
    precision = build_precision("fp8", "cpu", ao_recipe=recipe)
    model = precision.wrap_forward(precision.convert_module(_model()))
    assert _kinds(model)["2"] == "Float8Linear" and _kinds(model)["6"] == "Linear"
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(128, 16, generator=generator), torch.randn(128, 8, generator=generator)
    losses = []
    for _ in range(25):
        optimizer.zero_grad()
        out = model(x)
        assert out.dtype == torch.float32
        loss = nn.functional.mse_loss(out, y)
        precision.backward(loss)
        assert precision.optimizer_step(optimizer)
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    assert model[2].weight.dtype == torch.float32  # master weights stay fp32


def test_fsdp2_turns_on_the_fp8_all_gather_unless_a_config_is_given():
    from torchao.float8 import Float8LinearConfig

    precision = build_precision("fp8", "cpu")
    assert precision.recipe.enable_fsdp_float8_all_gather is False
    precision.adapt_to_sharding()  # what the FSDP2 strategy calls
    assert precision.recipe.enable_fsdp_float8_all_gather is True
    config = Float8LinearConfig()
    own = build_precision("fp8", "cpu", ao_recipe=AORecipeKwargs(config=config))
    own.adapt_to_sharding()
    assert own.recipe.config is config and not config.enable_fsdp_float8_all_gather

"""fp8 training through NVIDIA Transformer Engine (CUDA only).

``transformer_engine`` is imported only when this precision is built; it is not a
declared extra (its wheels need a CUDA toolchain), so a missing one names
``pip install "transformer-engine[pytorch]"``. Linear and LayerNorm layers are
swapped for TE's, keeping the same Parameter objects so optimizers built earlier still
point at the trained weights, and forward runs under TE's fp8 autocast inside bf16 autocast.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError
from accel_state.imports import require

from accel_precision.amp import BF16Precision
from accel_precision.kwargs import AutocastKwargs, FP8RecipeKwargs, TERecipeKwargs

if TYPE_CHECKING:
    from accel_precision.kwargs import AORecipeKwargs, GradScalerKwargs

__all__ = ["TEFP8Precision", "import_transformer_engine", "convert_model",
           "has_transformer_engine_layers", "contextual_fp8_autocast"]


def import_transformer_engine() -> Any:
    """``transformer_engine.pytorch``, or MissingDependencyError with the install line."""
    return require("transformer_engine.pytorch", feature="fp8 training with Transformer Engine",
                    package="transformer-engine", extra="pytorch", dist="transformer-engine")


def has_transformer_engine_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds Transformer Engine layers."""
    return any(type(m).__module__.startswith("transformer_engine") for m in model.modules())


def _swap(module: torch.nn.Module, te: Any) -> None:
    for name, child in list(module.named_children()):
        if type(child) is torch.nn.Linear:
            new = te.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                            params_dtype=child.weight.dtype)
            new.weight = child.weight
            if child.bias is not None:
                new.bias = child.bias
            setattr(module, name, new)
        elif type(child) is torch.nn.LayerNorm and child.elementwise_affine:
            new = te.LayerNorm(child.normalized_shape[0], eps=child.eps,
                               params_dtype=child.weight.dtype)
            new.weight = child.weight
            if child.bias is not None:
                new.bias = child.bias
            setattr(module, name, new)
        else:
            _swap(child, te)


def convert_model(model: torch.nn.Module) -> torch.nn.Module:
    """Swap ``nn.Linear`` / ``nn.LayerNorm`` for Transformer Engine's, in place."""
    te = import_transformer_engine()
    with torch.no_grad():
        _swap(model, te)
    return model


def _te_recipe(recipe: TERecipeKwargs) -> Any:
    te_recipe = require("transformer_engine.common.recipe", package="transformer-engine",
                        extra="pytorch", dist="transformer-engine")
    fmt = getattr(te_recipe.Format, recipe.fp8_format)
    if recipe.use_mxfp8_block_scaling:
        return te_recipe.MXFP8BlockScaling(fp8_format=fmt)
    options: dict[str, Any] = {
        "margin": recipe.margin, "fp8_format": fmt, "amax_history_len": recipe.amax_history_len,
        "amax_compute_algo": recipe.amax_compute_algo, "interval": recipe.interval,
        "override_linear_precision": recipe.override_linear_precision,
    }
    accepted = inspect.signature(te_recipe.DelayedScaling).parameters
    return te_recipe.DelayedScaling(**{k: v for k, v in options.items() if k in accepted})


class _FP8AutocastForward:
    """Forward under TE's fp8 autocast (in training, or always with ``use_during_eval``)."""

    def __init__(self, forward: Callable[..., Any], module: torch.nn.Module, recipe: Any,
                 use_during_eval: bool) -> None:
        self.forward = forward
        self.module = module
        self.recipe = recipe
        self.use_during_eval = use_during_eval
        te = import_transformer_engine()
        self.fp8_autocast = getattr(te, "fp8_autocast", None) or te.autocast
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        enabled = self.use_during_eval or self.module.training
        with self.fp8_autocast(enabled=enabled, fp8_recipe=self.recipe):
            return self.forward(*args, **kwargs)


def contextual_fp8_autocast(model_forward: Callable[..., Any], fp8_recipe: Any,
                            use_during_eval: bool = False, module: torch.nn.Module | None = None
                            ) -> Callable[..., Any]:
    """Wrap a forward in TE's fp8 autocast, on in training (and in eval when asked)."""
    owner = module if module is not None else getattr(model_forward, "__self__", None)
    if owner is None:
        raise ConfigurationError("contextual_fp8_autocast needs the module: pass module=model.")
    return _FP8AutocastForward(model_forward, owner, fp8_recipe, use_during_eval)


class TEFP8Precision(BF16Precision):
    """fp8 matmuls through Transformer Engine on NVIDIA GPUs (Hopper, Ada, Blackwell)."""

    name = "fp8"

    def __init__(self, *, device: torch.device | str | None = None,
                 autocast_kwargs: AutocastKwargs | None = None,
                 recipe: TERecipeKwargs | None = None) -> None:
        device = torch.device(device if device is not None else "cpu")
        if device.type != "cuda":
            raise ConfigurationError(
                f"fp8 through Transformer Engine needs a CUDA GPU, but training runs on "
                f"{device.type!r}. Use AORecipeKwargs (torchao fp8, which also runs on CPU) or "
                "another mixed_precision; on a GPU machine install Transformer Engine with "
                'pip install "transformer-engine[pytorch]".')
        super().__init__(device=device, autocast_kwargs=autocast_kwargs)
        if isinstance(recipe, FP8RecipeKwargs):
            recipe = recipe.to_te()
        self.recipe = recipe or TERecipeKwargs()
        import_transformer_engine()

    @classmethod
    def from_handlers(cls, device: torch.device, *, autocast: AutocastKwargs | None = None,
                      scaler: GradScalerKwargs | None = None,
                      ao_recipe: AORecipeKwargs | None = None,
                      te_recipe: TERecipeKwargs | None = None) -> TEFP8Precision:
        return cls(device=device, autocast_kwargs=autocast, recipe=te_recipe)

    @property
    def fp8_backend(self) -> str:
        return "TE"

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module if has_transformer_engine_layers(module) else convert_model(module)

    def wrap_forward(self, module: torch.nn.Module) -> torch.nn.Module:
        if hasattr(module, "_original_forward"):
            return module
        module = super().wrap_forward(module)  # bf16 autocast + fp32 outputs, original kept
        module.forward = _FP8AutocastForward(module.forward, module, _te_recipe(self.recipe),
                                             self.recipe.use_autocast_during_eval)
        return module

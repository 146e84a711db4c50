"""Accelerate's free-standing precision helpers, under Accelerate's names and signatures.

They wrap what this package already does for :class:`~accel_precision.base.Precision`
(the linear-layer filter of torchao fp8, autocast, Transformer Engine's fp8 forward) so
code written against ``accelerate.utils`` runs unchanged. MS-AMP is not supported:
:class:`MSAMPRecipeKwargs` exists so that such code fails with a message naming the fix.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from accel_state import ConfigurationError, KwargsHandler

from accel_precision.ao import filter_linear_layers, find_first_last_linear_layers
from accel_precision.kwargs import AutocastKwargs, FP8RecipeKwargs, TERecipeKwargs
from accel_precision.te import _te_recipe, contextual_fp8_autocast, import_transformer_engine

__all__ = ["MSAMPRecipeKwargs", "apply_fp8_autowrap", "autocast_context",
           "filter_first_and_last_linear_layers"]

#: autocast dtype of each mixed-precision mode that autocasts (fp8 computes the rest in bf16)
_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}


def filter_first_and_last_linear_layers(module: torch.nn.Module, fqn: str) -> bool:
    """Accelerate's default ``module_filter_func`` for torchao fp8: True when ``module``
    (named ``fqn``) should become fp8, i.e. it is a 16-aligned Linear that is neither the
    first nor the last Linear found inside ``module`` (those stay in high precision)."""
    first, last = find_first_last_linear_layers(module)
    return filter_linear_layers(module, fqn, [n for n in (first, last) if n is not None])


def autocast_context(mixed_precision: str, device_type: str, native_amp: bool = False,
                     autocast_kwargs: AutocastKwargs | None = None
                     ) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for ``mixed_precision`` on ``device_type`` when ``native_amp``,
    else a no-op context (so a caller can always write ``with ...:``)."""
    if autocast_kwargs is None:
        autocast_kwargs = AutocastKwargs()
    elif not isinstance(autocast_kwargs, AutocastKwargs):
        raise ConfigurationError(
            f"autocast_kwargs={autocast_kwargs!r} must be an AutocastKwargs (or None).")
    mode = str(mixed_precision)
    if mode not in (*_AUTOCAST_DTYPES, "no"):
        raise ConfigurationError(f"mixed_precision={mode!r} must be one of 'no', 'fp16', "
                                 "'bf16' or 'fp8'.")
    if not native_amp or mode == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=_AUTOCAST_DTYPES[mode], **autocast_kwargs.to_kwargs())


def apply_fp8_autowrap(model: torch.nn.Module, fp8_recipe_handler: TERecipeKwargs | None = None
                       ) -> torch.nn.Module:
    """Run ``model.forward`` under Transformer Engine's fp8 autocast (in training, and in
    eval when the recipe's ``use_autocast_during_eval`` says so); returns ``model``.

    Needs ``transformer-engine`` (MissingDependencyError naming the install otherwise)."""
    import_transformer_engine()
    if fp8_recipe_handler is None:
        fp8_recipe_handler = TERecipeKwargs()
    elif isinstance(fp8_recipe_handler, FP8RecipeKwargs):
        fp8_recipe_handler = fp8_recipe_handler.to_te()
    elif not isinstance(fp8_recipe_handler, TERecipeKwargs):
        raise ConfigurationError(f"fp8_recipe_handler={fp8_recipe_handler!r} must be a "
                                 "TERecipeKwargs (Transformer Engine's recipe) or None.")
    recipe = _te_recipe(fp8_recipe_handler)
    model.forward = contextual_fp8_autocast(
        model.forward, recipe, fp8_recipe_handler.use_autocast_during_eval, module=model)
    return model


@dataclass(kw_only=True)
class MSAMPRecipeKwargs(KwargsHandler):
    """Accelerate's MS-AMP fp8 recipe. accel does not run MS-AMP, so building one is an
    error that names the supported fp8 recipes (Transformer Engine, torchao)."""

    opt_level: str = "O2"
    """MS-AMP's optimisation level (O1 or O2) in Accelerate; never used here."""

    def __post_init__(self) -> None:
        raise ConfigurationError(
            f"MSAMPRecipeKwargs(opt_level={self.opt_level!r}): accel does not support MS-AMP. "
            "Use TERecipeKwargs (Transformer Engine) or AORecipeKwargs (torchao) with "
            "mixed_precision='fp8' instead.")

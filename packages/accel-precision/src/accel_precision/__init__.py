"""accel-precision: fp16 / bf16 / fp8 mixed precision behind one :class:`Precision` interface.

Pick one by name with :func:`build_precision` (names come from the :data:`PRECISIONS`
registry, entry-point group ``accel.precisions``), or construct a subclass directly.
Optional backends (torchao, Transformer Engine) are imported only when used.

Every name loads on first use (PEP 562): ``import accel`` pays only for what the facade uses
(the Precision interface and the kwargs handlers); the AMP, torchao and Transformer Engine
modules load when a precision is resolved or one of their names is used. Type checkers see
the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.3"

# module -> the public names it defines
_MODULES = {
    "accel_precision.amp": (
        "AutocastPrecision", "BF16Precision", "FP16Precision", "check_autocast",
        "make_grad_scaler", "step_with_scaler",
    ),
    "accel_precision.ao": (
        "TorchAOFP8Precision", "convert_model_to_fp8_ao", "default_module_filter",
        "filter_linear_layers", "find_first_last_linear_layers", "has_ao_layers",
    ),
    "accel_precision.base": ("PRECISIONS", "AutocastForward", "NoPrecision", "Precision"),
    "accel_precision.kwargs": (
        "AORecipeKwargs", "AutocastKwargs", "FP8BackendType", "FP8RecipeKwargs",
        "GradScalerKwargs", "PrecisionType", "TERecipeKwargs",
    ),
    "accel_precision.resolve": ("build_precision", "fp8_precision", "resolve_mixed_precision"),
    "accel_precision.te": (
        "TEFP8Precision", "contextual_fp8_autocast", "convert_model",
        "has_transformer_engine_layers",
    ),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AORecipeKwargs", "AutocastForward", "AutocastKwargs", "AutocastPrecision", "BF16Precision",
    "FP16Precision", "FP8BackendType", "FP8RecipeKwargs", "GradScalerKwargs", "NoPrecision",
    "PRECISIONS", "Precision", "PrecisionType", "TEFP8Precision", "TERecipeKwargs",
    "TorchAOFP8Precision", "build_precision", "check_autocast", "contextual_fp8_autocast",
    "convert_model", "convert_model_to_fp8_ao", "default_module_filter", "filter_linear_layers",
    "find_first_last_linear_layers", "fp8_precision", "has_ao_layers",
    "has_transformer_engine_layers", "make_grad_scaler", "resolve_mixed_precision",
    "step_with_scaler",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_precision' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


if TYPE_CHECKING:
    from accel_precision.amp import (
        AutocastPrecision,
        BF16Precision,
        FP16Precision,
        check_autocast,
        make_grad_scaler,
        step_with_scaler,
    )
    from accel_precision.ao import (
        TorchAOFP8Precision,
        convert_model_to_fp8_ao,
        default_module_filter,
        filter_linear_layers,
        find_first_last_linear_layers,
        has_ao_layers,
    )
    from accel_precision.base import PRECISIONS, AutocastForward, NoPrecision, Precision
    from accel_precision.kwargs import (
        AORecipeKwargs,
        AutocastKwargs,
        FP8BackendType,
        FP8RecipeKwargs,
        GradScalerKwargs,
        PrecisionType,
        TERecipeKwargs,
    )
    from accel_precision.resolve import build_precision, fp8_precision, resolve_mixed_precision
    from accel_precision.te import (
        TEFP8Precision,
        contextual_fp8_autocast,
        convert_model,
        has_transformer_engine_layers,
    )

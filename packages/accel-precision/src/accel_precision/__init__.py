"""accel-precision: fp16 / bf16 / fp8 mixed precision behind one :class:`Precision` interface.

Pick one by name with :func:`build_precision` (names come from the :data:`PRECISIONS`
registry, entry-point group ``accel.precisions``), or construct a subclass directly.
Optional backends (torchao, Transformer Engine) are imported only when used.
"""

from __future__ import annotations

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

__version__ = "0.1.2"

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

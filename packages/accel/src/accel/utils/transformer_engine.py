"""Accelerate's ``accelerate.utils.transformer_engine`` path: accel-precision's TE helpers."""

from __future__ import annotations

from accel_precision.compat import apply_fp8_autowrap
from accel_precision.te import (
    contextual_fp8_autocast,
    convert_model,
    has_transformer_engine_layers,
)

from accel._module_compat import forward_to

__all__ = ["apply_fp8_autowrap", "contextual_fp8_autocast", "convert_model",
           "has_transformer_engine_layers"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

"""Accelerate's ``accelerate.utils.transformer_engine`` path: accel-precision's TE helpers."""

from __future__ import annotations

from accel_precision.compat import apply_fp8_autowrap
from accel_precision.te import (
    contextual_fp8_autocast,
    convert_model,
    has_transformer_engine_layers,
)

__all__ = ["apply_fp8_autowrap", "contextual_fp8_autocast", "convert_model",
           "has_transformer_engine_layers"]

"""Accelerate's ``accelerate.utils.transformer_engine`` path: accel-precision's TE helpers."""

from __future__ import annotations

from accel_precision.te import (
    contextual_fp8_autocast,
    convert_model,
    has_transformer_engine_layers,
)

__all__ = ["contextual_fp8_autocast", "convert_model", "has_transformer_engine_layers"]

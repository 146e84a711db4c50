"""Accelerate's ``accelerate.utils.ao`` path: torchao fp8 helpers from accel-precision."""

from __future__ import annotations

from accel_precision.ao import (
    convert_model_to_fp8_ao,
    default_module_filter,
    filter_linear_layers,
    find_first_last_linear_layers,
    has_ao_layers,
)
from accel_precision.compat import filter_first_and_last_linear_layers

from accel._module_compat import forward_to

__all__ = ["convert_model_to_fp8_ao", "default_module_filter", "filter_linear_layers",
           "filter_first_and_last_linear_layers",
           "find_first_last_linear_layers", "has_ao_layers"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

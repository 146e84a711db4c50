"""Accelerate's ``accelerate.utils.bnb`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.quantize import (
    get_keys_to_not_convert,
    get_parameter_device,
    get_quantized_model_device_map,
    has_4bit_bnb_layers,
    load_and_quantize_model,
    quantize_and_offload_8bit,
    replace_with_bnb_layers,
)

from accel._module_compat import forward_to

__all__ = ["load_and_quantize_model", "has_4bit_bnb_layers", "replace_with_bnb_layers",
           "get_keys_to_not_convert", "get_parameter_device", "get_quantized_model_device_map",
           "quantize_and_offload_8bit"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.big_modeling")

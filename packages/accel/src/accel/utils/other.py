"""Accelerate's ``accelerate.utils.other`` path: model helpers (unwrapping, torch.compile)."""

from __future__ import annotations

from accel_checkpoint.weights import clean_state_dict_for_safetensors, save
from accel_parallel import (
    compile_regions,
    extract_model_from_parallel,
    get_module_children_bottom_up,
    has_compiled_regions,
    is_compiled_module,
    recursive_getattr,
)

__all__ = ["clean_state_dict_for_safetensors", "compile_regions", "extract_model_from_parallel",
           "get_module_children_bottom_up", "has_compiled_regions", "is_compiled_module",
           "recursive_getattr", "save"]

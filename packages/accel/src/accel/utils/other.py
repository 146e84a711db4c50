"""Accelerate's ``accelerate.utils.other`` path: model helpers (unwrapping, torch.compile,
``is_peft_model``)."""

from __future__ import annotations

from accel_checkpoint.weights import clean_state_dict_for_safetensors, save
from accel_launch.config_command import write_basic_config
from accel_parallel import (
    compile_regions,
    extract_model_from_parallel,
    get_module_children_bottom_up,
    has_compiled_regions,
    is_compiled_module,
    recursive_getattr,
)
from accel_parallel.tp_plan import get_model_tp_size
from accel_state.imports import is_peft_model

from accel._accelerate_helpers import (
    get_free_port,
    get_pretty_name,
    has_repeated_blocks,
    is_repeated_blocks,
    is_torch_distributed_available,
    merge_dicts,
)
from accel._module_compat import forward_to

__all__ = ["clean_state_dict_for_safetensors", "compile_regions", "extract_model_from_parallel",
           "get_module_children_bottom_up", "get_model_tp_size", "has_compiled_regions",
           "is_compiled_module", "is_peft_model", "recursive_getattr", "save", "get_free_port",
           "get_pretty_name", "has_repeated_blocks", "is_repeated_blocks",
           "is_torch_distributed_available", "merge_dicts", "write_basic_config"]

# the rest of Accelerate's module (``convert_bytes``, ``is_port_in_use``, ...)
__getattr__ = forward_to(__name__, "accel.utils", "accel.logging")

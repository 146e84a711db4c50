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
from accel_parallel.mesh.tp_plan import get_model_tp_size
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

_forward = forward_to(__name__, "accel.utils", "accel.logging")


def _torch_safe_globals() -> list:
    """The numpy objects Accelerate allow-lists for ``torch.load(weights_only=True)`` of its
    RNG files (``torch.serialization.add_safe_globals``). accel itself never unpickles a
    checkpoint (DESIGN §5); the list is here for code that loads Accelerate's files with
    torch. Empty without numpy."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core  # numpy 2 moved it to np._core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def __getattr__(name: str):
    # TORCH_SAFE_GLOBALS imports numpy, so only when asked for; then the rest of
    # Accelerate's module (``convert_bytes``, ``is_port_in_use``, ...)
    if name == "TORCH_SAFE_GLOBALS":
        value = globals()[name] = _torch_safe_globals()
        return value
    return _forward(name)

"""Accelerate's ``accelerate.utils.modeling`` module path: re-exports of accel-inference only
(``get_grad_scaler`` / ``get_mixed_precision_context_manager`` are accel-precision's)."""

from __future__ import annotations

from accel_inference.device_map import check_device_map, clean_device_map, infer_auto_device_map
from accel_inference.fallback import fallback_allocate
from accel_inference.loading import load_checkpoint_in_model, load_state_dict
from accel_inference.offload import (
    get_state_dict_from_offload,
    get_state_dict_offloaded_model,
    load_offloaded_weights,
)
from accel_inference.sizing import (
    calculate_maximum_sizes,
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_balanced_memory,
    get_max_layer_size,
    get_max_memory,
    get_module_leaves,
)
from accel_inference.tensors import (
    align_module_device,
    get_non_persistent_buffers,
    has_offloaded_params,
    named_module_tensors,
    set_module_tensor_to_device,
)
from accel_inference.tied import (
    check_tied_parameters_in_config,
    check_tied_parameters_on_same_device,
    find_tied_parameters,
    get_module_size_with_ties,
    retie_parameters,
)

from accel._accelerate_helpers import check_device_same, get_grad_scaler, is_tqdm_available
from accel._module_compat import forward_to

# get_module_leaves and fallback_allocate are Accelerate's module-only names (not in
# accelerate.utils), so they stay out of __all__
__all__ = ["infer_auto_device_map", "check_device_map", "clean_device_map",
           "load_checkpoint_in_model", "load_state_dict", "load_offloaded_weights",
           "calculate_maximum_sizes", "compute_module_sizes", "compute_module_total_buffer_size",
           "get_balanced_memory", "get_max_layer_size", "get_max_memory", "align_module_device",
           "get_non_persistent_buffers", "has_offloaded_params", "named_module_tensors",
           "set_module_tensor_to_device", "check_tied_parameters_in_config",
           "check_tied_parameters_on_same_device", "find_tied_parameters", "retie_parameters",
           "get_state_dict_from_offload", "get_module_size_with_ties",
           "get_state_dict_offloaded_model", "check_device_same", "get_grad_scaler"]

# the rest of Accelerate's module (``convert_file_size_to_int``, ``dtype_byte_size``, ...)
__getattr__ = forward_to(__name__, "accel.utils", "accel.state")

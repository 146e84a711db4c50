"""Accelerate's ``accelerate.big_modeling`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.attach import attach_align_device_hook, attach_align_device_hook_on_blocks
from accel_inference.big_modeling import (
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    load_checkpoint_and_dispatch,
)
from accel_inference.device_map import check_device_map, infer_auto_device_map
from accel_inference.empty_init import init_empty_weights, init_on_device
from accel_inference.hooks import (
    AlignDevicesHook,
    CpuOffload,
    LayerwiseCastingHook,
    UserCpuOffloadHook,
    add_hook_to_module,
)
from accel_inference.layerwise import attach_layerwise_casting_hooks
from accel_inference.loading import load_checkpoint_in_model
from accel_inference.offload import OffloadedWeightsLoader
from accel_inference.sizing import get_balanced_memory
from accel_inference.tied import find_tied_parameters, retie_parameters

from accel._module_compat import forward_to

__all__ = ["init_empty_weights", "init_on_device", "cpu_offload", "cpu_offload_with_hook",
           "disk_offload", "dispatch_model", "load_checkpoint_and_dispatch",
           "load_checkpoint_in_model", "infer_auto_device_map", "check_device_map",
           "get_balanced_memory", "find_tied_parameters", "retie_parameters",
           "AlignDevicesHook", "CpuOffload", "UserCpuOffloadHook", "add_hook_to_module",
           "attach_align_device_hook", "attach_align_device_hook_on_blocks",
           "OffloadedWeightsLoader", "attach_layerwise_casting_hooks", "LayerwiseCastingHook"]

# names Accelerate's module imported for its own use (``accelerate.big_modeling.X``)
__getattr__ = forward_to(__name__, "accel.hooks", "accel.utils")

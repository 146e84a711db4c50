"""Accelerate's ``accelerate.hooks`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.attach import (
    attach_align_device_hook,
    attach_align_device_hook_on_blocks,
    attach_execution_device_hook,
    remove_hook_from_submodules,
)
from accel_inference.hooks import (
    AlignDevicesHook,
    CpuOffload,
    LayerwiseCastingHook,
    ModelHook,
    SequentialHook,
    UserCpuOffloadHook,
    add_hook_to_module,
    remove_hook_from_module,
)
from accel_inference.layerwise import attach_layerwise_casting_hooks

from accel._module_compat import forward_to

__all__ = ["ModelHook", "SequentialHook", "AlignDevicesHook", "CpuOffload", "UserCpuOffloadHook",
           "LayerwiseCastingHook", "add_hook_to_module", "remove_hook_from_module",
           "attach_execution_device_hook", "attach_align_device_hook",
           "attach_align_device_hook_on_blocks", "remove_hook_from_submodules",
           "attach_layerwise_casting_hooks"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

"""Accelerate's ``accelerate.utils.memory`` path: re-exports of ``accel_state.memory``."""

from __future__ import annotations

from accel_state.memory import (
    clear_device_cache,
    find_executable_batch_size,
    release_memory,
    should_reduce_batch_size,
)

from accel._module_compat import forward_to

__all__ = ["clear_device_cache", "find_executable_batch_size", "release_memory",
           "should_reduce_batch_size"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

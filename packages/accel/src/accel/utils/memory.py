"""Accelerate's ``accelerate.utils.memory`` path: re-exports of ``accel_state.memory``."""

from __future__ import annotations

from accel_state.memory import (
    clear_device_cache,
    find_executable_batch_size,
    release_memory,
    should_reduce_batch_size,
)

__all__ = ["clear_device_cache", "find_executable_batch_size", "release_memory",
           "should_reduce_batch_size"]

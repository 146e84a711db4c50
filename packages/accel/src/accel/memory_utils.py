"""Accelerate's older ``accelerate.memory_utils`` path: re-exports of ``accel_state.memory``."""

from __future__ import annotations

from accel_state.memory import find_executable_batch_size, release_memory

__all__ = ["find_executable_batch_size", "release_memory"]

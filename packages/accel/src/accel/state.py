"""Accelerate's ``accelerate.state`` path: the very same objects as ``accel_state``, and the
facade's ``AcceleratorState``."""

from __future__ import annotations

from accel_state import DistributedType, GradientState, PartialState, is_initialized
from accel_state.state import SharedDict, ThreadLocalSharedDict

from accel._accelerator_state import AcceleratorState

__all__ = ["AcceleratorState", "DistributedType", "GradientState", "PartialState", "SharedDict",
           "ThreadLocalSharedDict", "is_initialized"]

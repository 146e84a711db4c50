"""Accelerate's ``accelerate.state`` path: the very same objects as ``accel_state``."""

from __future__ import annotations

from accel_state import DistributedType, GradientState, PartialState, is_initialized
from accel_state.state import SharedDict, ThreadLocalSharedDict

__all__ = ["DistributedType", "GradientState", "PartialState", "SharedDict",
           "ThreadLocalSharedDict", "is_initialized"]

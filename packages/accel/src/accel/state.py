"""Accelerate's ``accelerate.state`` path: the very same objects as ``accel_state``, and the
facade's ``AcceleratorState``."""

from __future__ import annotations

from accel_state import DistributedType, GradientState, PartialState, is_initialized
from accel_state.state import SharedDict, ThreadLocalSharedDict

from accel._accelerator_state import AcceleratorState
from accel._accelerate_helpers import do_nothing
from accel._module_compat import forward_to

__all__ = ["AcceleratorState", "DistributedType", "GradientState", "PartialState", "SharedDict",
           "ThreadLocalSharedDict", "is_initialized"]

__all__ += ["do_nothing"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

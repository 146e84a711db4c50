"""Accelerate's ``accelerate.utils.operations`` path."""

from __future__ import annotations

from accel_state.operations import *  # noqa: F403
from accel_state.operations import __all__ as __all__  # noqa: F401

from accel._accelerate_helpers import (
    TENSOR_INT_TO_DTYPE,
    TENSOR_TYPE_TO_INT,
    gather_tensor_shape,
    is_torch_distributed_available,
    is_torch_xpu_tensor,
)
from accel._module_compat import forward_to


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.state")

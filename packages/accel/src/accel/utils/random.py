"""Accelerate's ``accelerate.utils.random`` path."""

from __future__ import annotations

from accel_state.random import *  # noqa: F403
from accel_state.random import __all__ as __all__  # noqa: F401

from accel._module_compat import forward_to


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.state")

"""Accelerate's ``accelerate.logging`` path: multi-process aware loggers."""

from __future__ import annotations

from accel_state.logging import MultiProcessAdapter, get_logger

from accel._module_compat import forward_to

__all__ = ["MultiProcessAdapter", "get_logger"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

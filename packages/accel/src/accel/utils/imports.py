"""Accelerate's ``accelerate.utils.imports`` path."""

from __future__ import annotations

from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as __all__  # noqa: F401

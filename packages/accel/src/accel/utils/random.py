"""Accelerate's ``accelerate.utils.random`` path."""

from __future__ import annotations

from accel_state.random import *  # noqa: F403
from accel_state.random import __all__ as __all__  # noqa: F401

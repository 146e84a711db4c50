"""Accelerate's ``accelerate.utils.operations`` path."""

from __future__ import annotations

from accel_state.operations import *  # noqa: F403
from accel_state.operations import __all__ as __all__  # noqa: F401

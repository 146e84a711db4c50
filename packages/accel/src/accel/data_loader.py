"""Accelerate's ``accelerate.data_loader`` path: the same objects as ``accel_data``."""

from __future__ import annotations

from accel_data import *  # noqa: F403 - this module is a re-export by design
from accel_data import __all__ as __all__  # noqa: F401

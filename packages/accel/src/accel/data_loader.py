"""Accelerate's ``accelerate.data_loader`` path: the same objects as ``accel_data``."""

from __future__ import annotations

from accel_data import *  # noqa: F403 - this module is a re-export by design
from accel_data import __all__ as __all__  # noqa: F401

from accel._accelerate_helpers import MpDeviceLoaderWrapper
from accel._module_compat import forward_to


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.logging")

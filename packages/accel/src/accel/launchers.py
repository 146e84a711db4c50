"""Accelerate's ``accelerate.launchers`` path: the same objects as :mod:`accel_launch.launchers`."""

from __future__ import annotations

from accel_launch.launch_compat import test_launch
from accel_launch.launchers import debug_launcher, notebook_launcher

from accel._module_compat import forward_to

__all__ = ["debug_launcher", "notebook_launcher", "test_launch"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.state")

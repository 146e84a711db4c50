"""Accelerate's ``accelerate.launchers`` path: the same objects as :mod:`accel_launch.launchers`."""

from __future__ import annotations

from accel_launch.launch_compat import test_launch
from accel_launch.launchers import debug_launcher, notebook_launcher

__all__ = ["debug_launcher", "notebook_launcher", "test_launch"]

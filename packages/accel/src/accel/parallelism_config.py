"""Accelerate's ``accelerate.parallelism_config`` path: re-exports only."""

from __future__ import annotations

from accel_parallel.mesh.parallelism_config import ParallelismConfig

from accel._module_compat import forward_to

__all__ = ["ParallelismConfig"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

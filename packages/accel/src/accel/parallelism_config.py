"""Accelerate's ``accelerate.parallelism_config`` path: re-exports only."""

from __future__ import annotations

from accel_parallel.parallelism_config import ParallelismConfig

__all__ = ["ParallelismConfig"]

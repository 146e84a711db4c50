"""Accelerate's ``accelerate.utils.deepspeed`` path: re-exports from accel-parallel."""

from __future__ import annotations

from accel_parallel.deepspeed_dummies import DummyOptim, DummyScheduler
from accel_parallel.deepspeed_json import HfDeepSpeedConfig
from accel_parallel.deepspeed_plugin import DeepSpeedPlugin

__all__ = ["DeepSpeedPlugin", "DummyOptim", "DummyScheduler", "HfDeepSpeedConfig"]

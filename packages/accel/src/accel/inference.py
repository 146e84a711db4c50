"""Accelerate's ``accelerate.inference`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.pipeline import (
    build_pipeline,
    find_pippy_batch_size,
    generate_device_map,
    pippy_forward,
    prepare_pippy,
)

__all__ = ["prepare_pippy", "generate_device_map", "build_pipeline", "pippy_forward",
           "find_pippy_batch_size"]

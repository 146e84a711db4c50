"""Accelerate's ``accelerate.inference`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.pipeline import (
    build_pipeline,
    find_pippy_batch_size,
    generate_device_map,
    pippy_forward,
    prepare_pippy,
)

from accel._module_compat import forward_to

__all__ = ["prepare_pippy", "generate_device_map", "build_pipeline", "pippy_forward",
           "find_pippy_batch_size"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

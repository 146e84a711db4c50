"""Variables read by accel-inference (big-model loading, offload, pipelines)."""

from __future__ import annotations

from accel_state.env._core import _var

INIT_INCLUDE_BUFFERS = _var(
    "ACCEL_INIT_INCLUDE_BUFFERS",
    "1 to make init_empty_weights() / init_on_device() also create buffers on the target "
    "device (meta) when include_buffers= is not given. By default buffers stay on the CPU, "
    "since models often compute them in __init__ and they are small.",
    "ACCELERATE_INIT_INCLUDE_BUFFERS")

__all__ = [name for name in dict(globals()) if name.isupper()]

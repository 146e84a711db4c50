"""Variables read by accel-inference (big-model loading, offload, pipelines)."""

from __future__ import annotations

from accel_state.env._core import _var

INIT_INCLUDE_BUFFERS = _var(
    "ACCEL_INIT_INCLUDE_BUFFERS",
    "1 to make init_empty_weights() / init_on_device() also create buffers on the target "
    "device (meta) when include_buffers= is not given. By default buffers stay on the CPU, "
    "since models often compute them in __init__ and they are small.",
    "ACCELERATE_INIT_INCLUDE_BUFFERS")

BYPASS_DEVICE_MAP = _var(
    "ACCEL_BYPASS_DEVICE_MAP",
    "true to let Accelerator.prepare() take a model dispatched over several devices "
    "(an hf_device_map with more than one entry, e.g. loaded with device_map='auto') in a "
    "distributed run. By default that is an error: each process would train its own copy "
    "of a model that is split across devices, which DDP/FSDP cannot synchronise.",
    "ACCELERATE_BYPASS_DEVICE_MAP")

__all__ = [name for name in dict(globals()) if name.isupper()]

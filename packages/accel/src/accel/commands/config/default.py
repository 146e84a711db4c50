"""Accelerate's ``accelerate.commands.config.default`` path (``accel config default``)."""

from __future__ import annotations

from accel_launch.config_command import write_basic_config

from accel._module_compat import forward_to

__all__ = ["write_basic_config"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

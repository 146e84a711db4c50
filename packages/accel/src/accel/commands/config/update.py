"""Accelerate's ``accelerate.commands.config.update`` path (``accel config update``)."""

from __future__ import annotations

from accel_launch.config_command import update_config

from accel._module_compat import forward_to

__all__ = ["update_config"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

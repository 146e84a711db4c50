"""Accelerate's ``accelerate.commands.env`` path: accel-launch's ``accel env`` verb."""

from __future__ import annotations

from accel_launch.env_command import collect_env_info, env_command, format_env_info
from accel_launch.env_command import register as env_command_register

from accel._module_compat import forward_to

__all__ = ["collect_env_info", "env_command", "env_command_register", "format_env_info"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

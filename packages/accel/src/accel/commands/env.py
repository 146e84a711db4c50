"""Accelerate's ``accelerate.commands.env`` path: accel-launch's ``accel env`` verb."""

from __future__ import annotations

from accel_launch.cli_compat import env_command_parser, verb_main
from accel_launch.env_command import collect_env_info, env_command, format_env_info
from accel_launch.env_command import register as env_command_register

from accel import __version__
from accel._module_compat import forward_to

version = __version__
main = verb_main("env")

__all__ = ["collect_env_info", "env_command", "env_command_register", "format_env_info",
           "env_command_parser", "main", "version"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

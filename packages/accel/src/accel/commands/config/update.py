"""Accelerate's ``accelerate.commands.config.update`` path (``accel config update``)."""

from __future__ import annotations

from accel_launch.cli_compat import SubcommandHelpFormatter, update_command_parser
from accel_launch.config_command import UPDATE_DESCRIPTION, update_config, update_config_command

from accel._module_compat import forward_to

description = UPDATE_DESCRIPTION

__all__ = ["update_config", "SubcommandHelpFormatter", "description", "update_command_parser",
           "update_config_command"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

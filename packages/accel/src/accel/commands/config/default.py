"""Accelerate's ``accelerate.commands.config.default`` path (``accel config default``)."""

from __future__ import annotations

from accel_launch.cli_compat import SubcommandHelpFormatter, default_command_parser
from accel_launch.config_command import (
    DEFAULT_DESCRIPTION,
    default_config_command,
    write_basic_config,
)

from accel._module_compat import forward_to

description = DEFAULT_DESCRIPTION

__all__ = ["write_basic_config", "SubcommandHelpFormatter", "default_command_parser",
           "default_config_command", "description"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

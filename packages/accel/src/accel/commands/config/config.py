"""Accelerate's ``accelerate.commands.config.config`` path: the questionnaire verb."""

from __future__ import annotations

from accel_launch.cli_compat import (
    CONFIG_DESCRIPTION,
    config_command_parser,
    get_cluster_input,
    get_sagemaker_input,
    get_user_input,
    verb_main,
)
from accel_launch.config_command import config_command

from accel._module_compat import forward_to

description = CONFIG_DESCRIPTION
main = verb_main("config")

__all__ = ["config_command", "config_command_parser", "description", "get_cluster_input",
           "get_sagemaker_input", "get_user_input", "main"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args")

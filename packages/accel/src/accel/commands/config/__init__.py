"""Accelerate's ``accelerate.commands.config`` path (a package, as in Accelerate): the objects
of accel-launch's config verb; ``.config_args``, ``.default`` and ``.update`` hold the finer
paths."""

from __future__ import annotations

from accel_launch.cli_compat import (
    config_command_parser,
    default_command_parser,
    get_config_parser,
    update_command_parser,
    verb_main,
)
from accel_launch.config_command import config_command, update_config, write_basic_config
from accel_launch.config_file import (
    cache_dir,
    default_config_file,
    default_json_config_file,
    default_yaml_config_file,
    load_config_from_file,
)

from accel._module_compat import forward_to

main = verb_main("config")

__all__ = ["cache_dir", "config_command", "default_config_file", "default_json_config_file",
           "default_yaml_config_file", "load_config_from_file", "update_config",
           "write_basic_config", "config_command_parser", "default_command_parser",
           "get_config_parser", "main", "update_command_parser"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

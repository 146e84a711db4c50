"""Accelerate's ``accelerate.commands.to_fsdp2`` path: accel-launch's ``accel to-fsdp2`` verb."""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.cli_compat import CustomArgumentParser
from accel_launch.parser import verb_parser
from accel_launch.to_fsdp2 import (
    ARGUMENT_KEY_MAPPING,
    ARGUMENT_VALUE_MAPPING,
    ConversionStatus,
    convert_config_to_fsdp2,
    load_config,
)
from accel_launch.to_fsdp2 import register as to_fsdp2_command_register
from accel_launch.to_fsdp2 import to_fsdp2_command as _convert_file

from accel._module_compat import forward_to

__all__ = ["ARGUMENT_KEY_MAPPING", "ARGUMENT_VALUE_MAPPING", "ConversionStatus",
           "convert_config_to_fsdp2", "load_config", "to_fsdp2_command",
           "to_fsdp2_command_parser", "to_fsdp2_command_register", "CustomArgumentParser"]


def to_fsdp2_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel to-fsdp2`` parser (added to ``subparsers`` when given), as Accelerate
    names it; its command is this module's :func:`to_fsdp2_command`."""
    parser = verb_parser(to_fsdp2_command_register, "to-fsdp2", subparsers)
    parser.set_defaults(func=to_fsdp2_command)
    return parser


def to_fsdp2_command(args: argparse.Namespace) -> int:
    """Accelerate's function: converts ``--config_file`` as ``accel to-fsdp2`` does, reading
    it through this module's :func:`load_config` (which code and tests replace here, as in
    Accelerate); the renamed and dropped keys are warnings of the logger."""
    return _convert_file(args, read=lambda path: load_config(path))


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")

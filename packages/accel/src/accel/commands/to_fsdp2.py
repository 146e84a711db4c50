"""Accelerate's ``accelerate.commands.to_fsdp2`` path: accel-launch's ``accel to-fsdp2`` verb."""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.parser import verb_parser
from accel_launch.to_fsdp2 import convert_config_to_fsdp2, to_fsdp2_command
from accel_launch.to_fsdp2 import register as to_fsdp2_command_register

__all__ = ["convert_config_to_fsdp2", "to_fsdp2_command", "to_fsdp2_command_parser",
           "to_fsdp2_command_register"]


def to_fsdp2_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel to-fsdp2`` parser (added to ``subparsers`` when given), as Accelerate
    names it."""
    return verb_parser(to_fsdp2_command_register, "to-fsdp2", subparsers)

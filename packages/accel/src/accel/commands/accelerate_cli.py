"""Accelerate's ``accelerate.commands.accelerate_cli`` path: the CLI entry point (`accel`'s
``main``) and every verb's parser builder."""

from __future__ import annotations

from accel_launch.cli import main
from accel_launch.cli_compat import CustomArgumentParser, env_command_parser, get_config_parser
from accel_launch.launch import launch_command_parser
from accel_launch.tpu_command import tpu_command_parser

from accel.commands.estimate import estimate_command_parser
from accel.commands.merge import merge_command_parser
from accel.commands.test import test_command_parser
from accel.commands.to_fsdp2 import to_fsdp2_command_parser

__all__ = ["CustomArgumentParser", "env_command_parser", "estimate_command_parser",
           "get_config_parser", "launch_command_parser", "main", "merge_command_parser",
           "test_command_parser", "to_fsdp2_command_parser", "tpu_command_parser"]

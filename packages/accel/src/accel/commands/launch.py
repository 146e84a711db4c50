"""Accelerate's ``accelerate.commands.launch`` path: the objects of :mod:`accel_launch`."""

from __future__ import annotations

from accel_launch.elastic import run_launch as launch_command_run
from accel_launch.launch import launch_command, launch_command_parser
from accel_launch.launch_utils import (
    prepare_deepspeed_cmd_env,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)

__all__ = [
    "launch_command",
    "launch_command_parser",
    "launch_command_run",
    "prepare_deepspeed_cmd_env",
    "prepare_multi_gpu_env",
    "prepare_simple_launcher_cmd_env",
]

"""Accelerate's ``accelerate.commands.env`` path: accel-launch's ``accel env`` verb."""

from __future__ import annotations

from accel_launch.env_command import collect_env_info, env_command, format_env_info
from accel_launch.env_command import register as env_command_register

__all__ = ["collect_env_info", "env_command", "env_command_register", "format_env_info"]

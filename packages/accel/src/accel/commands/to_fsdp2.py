"""Accelerate's ``accelerate.commands.to_fsdp2`` path: accel-launch's ``accel to-fsdp2`` verb."""

from __future__ import annotations

from accel_launch.to_fsdp2 import convert_config_to_fsdp2, to_fsdp2_command
from accel_launch.to_fsdp2 import register as to_fsdp2_command_register

__all__ = ["convert_config_to_fsdp2", "to_fsdp2_command", "to_fsdp2_command_register"]

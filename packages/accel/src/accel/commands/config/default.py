"""Accelerate's ``accelerate.commands.config.default`` path (``accel config default``)."""

from __future__ import annotations

from accel_launch.config_command import write_basic_config

__all__ = ["write_basic_config"]

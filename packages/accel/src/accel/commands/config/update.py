"""Accelerate's ``accelerate.commands.config.update`` path (``accel config update``)."""

from __future__ import annotations

from accel_launch.config_command import update_config

__all__ = ["update_config"]

"""Accelerate's ``accelerate.commands.menu`` path: the terminal selection menu
(``accel_launch.menu``)."""

from __future__ import annotations

from accel_launch.menu import BulletMenu

__all__ = ["BulletMenu"]

"""Accelerate's ``accelerate.commands.utils`` path: the CLI's parser classes (accel's)."""

from __future__ import annotations

from accel_launch.cli_compat import CustomArgumentGroup, CustomArgumentParser

__all__ = ["CustomArgumentGroup", "CustomArgumentParser"]

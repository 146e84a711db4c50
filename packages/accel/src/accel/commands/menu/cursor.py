"""Accelerate's ``accelerate.commands.menu.cursor`` path: hide and show the terminal cursor
(``accel_launch.menu``; ANSI escapes, which Windows 10+ terminals understand too)."""

from __future__ import annotations

from accel_launch.menu import hide, hide_cursor, show_cursor

__all__ = ["hide", "hide_cursor", "show_cursor"]

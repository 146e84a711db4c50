"""Accelerate's ``accelerate.commands.menu.helpers`` path: writing and moving the cursor
(``accel_launch.menu``)."""

from __future__ import annotations

from accel_launch.menu import (
    CURSOR_TO_CHAR,
    TERMINAL_WIDTH,
    Direction,
    clear_line,
    forceWrite,
    linebreak,
    move_cursor,
    reset_cursor,
    writeColor,
)

__all__ = ["CURSOR_TO_CHAR", "Direction", "TERMINAL_WIDTH", "clear_line", "forceWrite",
           "linebreak", "move_cursor", "reset_cursor", "writeColor"]

"""Accelerate's ``accelerate.commands.menu.selection_menu`` path: ``BulletMenu`` and the
helpers it draws with (``accel_launch.menu``)."""

from __future__ import annotations

from accel_launch.menu import (
    KEYMAP,
    BulletMenu,
    Direction,
    clear_line,
    forceWrite,
    in_colab,
    linebreak,
    move_cursor,
    reset_cursor,
    writeColor,
)

__all__ = ["BulletMenu", "Direction", "KEYMAP", "clear_line", "forceWrite", "in_colab",
           "linebreak", "move_cursor", "reset_cursor", "writeColor"]

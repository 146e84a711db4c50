"""Accelerate's ``accelerate.commands.menu.input`` path: binding keys to a class's methods
(``accel_launch.menu``)."""

from __future__ import annotations

from accel_launch.menu import KEYMAP, KeyHandler, get_character, mark, mark_multiple, register

__all__ = ["KEYMAP", "KeyHandler", "get_character", "mark", "mark_multiple", "register"]

"""Accelerate's ``accelerate.commands.menu.keymap`` path: key codes and the raw key reader
(``accel_launch.menu``; POSIX terminals: accel's Windows support is WSL)."""

from __future__ import annotations

from accel_launch.menu import ARROW_KEY_FLAG, KEYMAP, get_character, get_raw_chars

__all__ = ["ARROW_KEY_FLAG", "KEYMAP", "get_character", "get_raw_chars"]

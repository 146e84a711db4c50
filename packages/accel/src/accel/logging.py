"""Accelerate's ``accelerate.logging`` path: multi-process aware loggers."""

from __future__ import annotations

from accel_state.logging import MultiProcessAdapter, get_logger

__all__ = ["MultiProcessAdapter", "get_logger"]

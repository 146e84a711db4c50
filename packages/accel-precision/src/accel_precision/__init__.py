"""accel-precision: reserved in the 0.1 workspace; its features arrive in a later release."""

from __future__ import annotations

__version__ = "0.1.0"

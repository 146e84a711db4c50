"""Accelerate's ``accelerate.utils.tqdm`` path: accel-tracking's main-process progress bar.

As in Accelerate, ``accel.utils.tqdm`` (the attribute) is the function and
``from accel.utils.tqdm import tqdm`` imports it from this module.
"""

from __future__ import annotations

from accel_tracking import tqdm

__all__ = ["tqdm"]

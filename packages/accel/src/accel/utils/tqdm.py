"""Accelerate's ``accelerate.utils.tqdm`` path: accel-tracking's main-process progress bar.

As in Accelerate, ``accel.utils.tqdm`` (the attribute) is the function and
``from accel.utils.tqdm import tqdm`` imports it from this module.
"""

from __future__ import annotations

from accel_tracking import tqdm

from accel._accelerate_helpers import is_tqdm_available
from accel._module_compat import forward_to

__all__ = ["tqdm"]



# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

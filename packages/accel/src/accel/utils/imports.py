"""Accelerate's ``accelerate.utils.imports`` path: accel-state's availability probes, the
tracker probes of accel-tracking and the facade's ``deepspeed_required``."""

from __future__ import annotations

from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as _state_all
from accel_tracking.probes import *  # noqa: F403
from accel_tracking.probes import __all__ as _tracking_all

from accel._requirements import deepspeed_required  # noqa: F401
from accel._accelerate_helpers import (
    USE_TORCH_XLA,
    is_torch_distributed_available,
    is_tqdm_available,
)
from accel._module_compat import forward_to

__all__ = sorted({*_state_all, *_tracking_all, "deepspeed_required"})



# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

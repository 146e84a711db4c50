"""Accelerate's ``accelerate.utils.imports`` path: accel-state's availability probes, the
tracker probes of accel-tracking and the facade's ``deepspeed_required``."""

from __future__ import annotations

from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as _state_all
from accel_tracking.probes import *  # noqa: F403
from accel_tracking.probes import __all__ as _tracking_all

from accel._requirements import deepspeed_required  # noqa: F401

__all__ = sorted({*_state_all, *_tracking_all, "deepspeed_required"})

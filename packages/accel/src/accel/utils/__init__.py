"""Accelerate's ``accelerate.utils`` namespace: re-exports of the micro-packages' helpers.

Every name here is the very object defined in an ``accel_*`` package, so
``accel.utils.gather is accel_state.gather``.
"""

from __future__ import annotations

from accel_parallel import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    extract_model_from_parallel,
)
from accel_state import *  # noqa: F403
from accel_state import __all__ as _state_all
from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as _imports_all

from accel.utils.environment import *  # noqa: F403
from accel.utils.environment import __all__ as _environment_all

__all__ = [
    *_state_all, *_imports_all, *_environment_all, "DDPCommunicationHookType",
    "DistributedDataParallelKwargs", "extract_model_from_parallel",
]

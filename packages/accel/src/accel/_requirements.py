"""``deepspeed_required``: Accelerate's decorator for functions that only make sense under
DeepSpeed. It reads the run's :class:`~accel.state.AcceleratorState`, so it lives in the
facade (accel-state knows no plugins); ``accel.utils`` and ``accel.utils.imports`` re-export it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from accel_state import ConfigurationError, DistributedType

__all__ = ["deepspeed_required"]

_F = TypeVar("_F", bound=Callable[..., Any])


def deepspeed_required(func: _F) -> _F:
    """Calling ``func`` once an Accelerator runs anything but DeepSpeed is an error naming
    the fix; before any Accelerator is built the call goes through, as in Accelerate."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from accel._accelerator_state import AcceleratorState

        state = AcceleratorState._shared_state
        if state.get("_initialized") and state.get("distributed_type") != DistributedType.DEEPSPEED:
            raise ConfigurationError(
                f"{func.__name__} needs DeepSpeed, but this run's Accelerator uses "
                f"{state.get('distributed_type')}: build the Accelerator with "
                "deepspeed_plugin=DeepSpeedPlugin(...) (or `accel launch --use_deepspeed`).")
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]

"""``deepspeed_required``: Accelerate's decorator for helpers that only make sense under one
run type. It reads the run's :class:`~accel.state.AcceleratorState`, so it lives in the
facade (accel-state knows no plugins); which run type it needs and the fix it names are
accel-parallel's (``accel_parallel.state_view.refuse_other_runs``). ``accel.utils`` and
``accel.utils.imports`` re-export it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["deepspeed_required"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _requiring_run(decorator: str, func: _F) -> _F:
    """``func`` refused, once an Accelerator runs, outside the run type ``decorator`` (one of
    Accelerate's names) asks for; before any Accelerator is built the call goes through,
    as in Accelerate."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from accel_parallel.state_view import refuse_other_runs

        from accel._accelerator_state import AcceleratorState

        state = AcceleratorState._shared_state
        if state.get("_initialized"):
            refuse_other_runs(decorator, func.__name__, state.get("distributed_type"))
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def deepspeed_required(func: _F) -> _F:
    """Calling ``func`` once an Accelerator runs anything but DeepSpeed is an error naming
    the fix."""
    return _requiring_run("deepspeed_required", func)

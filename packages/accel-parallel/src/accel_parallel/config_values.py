"""One rule for the integer options of the parallelism configs (``ParallelismConfig``'s sizes,
``PipelineParallelConfig``'s counts): a value given in code, else the launcher's environment
variable, else the default; anything but an integer >= 1 is refused naming where it came from."""

from __future__ import annotations

from typing import Any

from accel_state import ConfigurationError

__all__ = ["positive_int"]


def positive_int(value: Any, name: str, var: Any, *, default: int | None, owner: str,
                 note: str = "") -> int | None:
    """``value`` as an int >= 1; None reads ``var`` (an ``accel_state.env`` variable, or None
    for none), and an unset or blank variable gives ``default``. ``note`` ends the error."""
    if value is None and var is not None:
        raw = var.get()
        if raw is None or not raw.strip():
            return default
        value, name = raw.strip(), f"{var.raw()[0]} (env)"
    try:
        number = int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or number < 1 or (isinstance(value, float) and value != number):
        raise ConfigurationError(f"{owner} {name}={value!r} must be an integer >= 1{note}.")
    return number

"""Progress bars that show once per machine instead of once per process."""

from __future__ import annotations

from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["tqdm"]


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm`` that is disabled on every process but the local main one.

    With ``main_process_only=False`` each process shows its own bar. tqdm is a
    dependency of accel-tracking, imported on first use so importing the package stays cheap.
    """
    if args and isinstance(args[0], bool):
        raise ConfigurationError(
            f"tqdm() got {args[0]!r} as its first argument, which is the iterable: pass "
            "main_process_only=True/False as a keyword instead.")
    from tqdm.auto import tqdm as bar
    disable = kwargs.pop("disable", False)
    if main_process_only and not disable:
        from accel_state.state import PartialState

        disable = not PartialState().is_local_main_process
    return bar(*args, disable=disable, **kwargs)

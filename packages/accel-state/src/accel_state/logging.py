"""Multi-process aware logging: log once (main process) or once per rank, in rank order."""

from __future__ import annotations

import functools
import logging
from typing import Any

from accel_state import env
from accel_state.state import PartialState

__all__ = ["MultiProcessAdapter", "get_logger"]


class MultiProcessAdapter(logging.LoggerAdapter):
    """A logger adapter taking two extra keyword arguments on every call.

    ``main_process_only=True`` (default) logs on the main process only;
    ``in_order=True`` logs on every process, one rank after the other.
    """

    @staticmethod
    def _should_log(main_process_only: bool) -> bool:
        return not main_process_only or PartialState().is_main_process

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not PartialState._shared_state:
            raise RuntimeError(
                "accel's multi-process logger needs the process state: create `PartialState()` or "
                "`Accelerator()` before logging with a logger from accel.logging.get_logger."
            )
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        if in_order and not main_process_only:
            state = PartialState()
            for rank in range(state.num_processes):
                if rank == state.process_index:
                    msg, kwargs = self.process(msg, kwargs)
                    self.logger.log(level, msg, *args, **kwargs)
                state.wait_for_everyone()
        elif self._should_log(main_process_only):
            msg, kwargs = self.process(msg, kwargs)
            self.logger.log(level, msg, *args, **kwargs)

    @functools.lru_cache(None)  # noqa: B019 - one warning per (adapter, message) on purpose
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """Log a warning only the first time these arguments are seen."""
        self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """A :class:`MultiProcessAdapter` around ``logging.getLogger(name)``.

    The level is ``log_level``, else ``ACCEL_LOG_LEVEL`` (alias ``ACCELERATE_LOG_LEVEL``),
    else left to the logging configuration.
    """
    level = log_level or env.LOG_LEVEL.get()
    logger = logging.getLogger(name)
    if level is not None:
        logger.setLevel(level.upper())
        logger.root.setLevel(level.upper())
    return MultiProcessAdapter(logger, {})

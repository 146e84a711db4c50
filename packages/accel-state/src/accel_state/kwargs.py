"""Kwargs handlers: small dataclasses that forward user options to a torch constructor."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["KwargsHandler", "InitProcessGroupKwargs", "GradientAccumulationPlugin"]


class KwargsHandler:
    """Base of the ``*Kwargs`` dataclasses; ``to_kwargs`` keeps only fields changed from default."""

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    def to_kwargs(self) -> dict[str, Any]:
        default = self.__class__().to_dict()
        return {k: v for k, v in self.to_dict().items() if default.get(k) != v}


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for ``torch.distributed.init_process_group``.

    ``backend`` defaults to the one that fits the device (gloo on CPU, nccl on CUDA, ...);
    ``timeout`` (a ``timedelta`` or seconds) bounds every collective of the default group.
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if isinstance(self.timeout, (int, float)) and not isinstance(self.timeout, bool):
            self.timeout = timedelta(seconds=self.timeout)
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise ConfigurationError(
                f"InitProcessGroupKwargs(timeout={self.timeout!r}) must be a datetime.timedelta "
                "or a number of seconds, e.g. timeout=timedelta(minutes=10)."
            )
        if self.timeout is not None and self.timeout.total_seconds() <= 0:
            raise ConfigurationError(
                f"InitProcessGroupKwargs(timeout={self.timeout!r}) must be positive."
            )



@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """How gradients are accumulated over several batches before an optimizer step.

    ``num_steps``: batches per optimizer step. ``adjust_scheduler``: count the skipped
    micro-steps in prepared schedulers. ``sync_with_dataloader``: always step on the last
    batch of a dataloader, even mid-cycle. ``sync_each_batch``: all-reduce gradients on every
    batch (more communication, less memory) instead of only on the stepping one.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is not None and (
            isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int) or self.num_steps < 1
        ):
            raise ConfigurationError(
                f"GradientAccumulationPlugin(num_steps={self.num_steps!r}) must be a positive integer."
            )

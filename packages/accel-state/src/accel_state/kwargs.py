"""Kwargs handlers: small dataclasses that forward user options to a torch constructor."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["KwargsHandler", "InitProcessGroupKwargs"]


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


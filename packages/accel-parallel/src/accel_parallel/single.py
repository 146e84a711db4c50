"""One process on one device: the model is only moved, never wrapped."""

from __future__ import annotations

from accel_parallel.strategy import Strategy

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """The strategy of a plain (non-distributed) run."""

    name = "single"

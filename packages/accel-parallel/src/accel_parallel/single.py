"""One process on one device: the model is only moved, never wrapped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel.strategy import Strategy

if TYPE_CHECKING:
    from accel_parallel.selection import StrategyConfig

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """The strategy of a plain (non-distributed) run: every hook is the base default."""

    name = "single"

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        return not config.state.use_distributed

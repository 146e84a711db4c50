"""The one table of strategies and presets by name (entry-point group ``accel.strategies``).

A module of its own, importing nothing of accel-parallel, so that a preset can find the
strategy it builds without importing the strategy interface (no import cycle);
``accel_parallel.STRATEGIES`` and ``accel_parallel.strategy.STRATEGIES`` are this object.
"""

from __future__ import annotations

from typing import Any

from accel_state import Registry

__all__ = ["STRATEGIES"]

#: strategy classes and :class:`~accel_parallel.strategy_options.StrategyPreset` objects by name
STRATEGIES: Registry[Any] = Registry("accel.strategies", "strategy")

"""The built-in presets: registered names for a strategy with fixed options.

Each registers in the ``accel.strategies`` entry-point group beside the strategies
(``pyproject.toml``), so ``ACCEL_STRATEGY=zero3``, ``accel launch --strategy zero3`` and a
config file's ``strategy: zero3`` build DeepSpeed with ZeRO stage 3. A preset is built only
when named; choosing by data asks the strategy classes. DeepSpeed's presets need the
``accel-parallel[deepspeed]`` extra, as the DeepSpeed strategy does.
"""

from __future__ import annotations

from accel_parallel.strategy_options import StrategyPreset

__all__ = ["ZERO1", "ZERO2", "ZERO3"]

ZERO1 = StrategyPreset("deepspeed", {"zero_stage": 1},
                       "DeepSpeed ZeRO stage 1: optimizer states sharded")
ZERO2 = StrategyPreset("deepspeed", {"zero_stage": 2},
                       "DeepSpeed ZeRO stage 2: optimizer states and gradients sharded")
ZERO3 = StrategyPreset("deepspeed", {"zero_stage": 3},
                       "DeepSpeed ZeRO stage 3: parameters, gradients and optimizer states "
                       "sharded")

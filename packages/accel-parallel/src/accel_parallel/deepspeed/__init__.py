"""DeepSpeed ZeRO 1/2/3: the strategy and everything only it uses, one module per concern.

:mod:`~accel_parallel.deepspeed.strategy` (``DeepSpeedStrategy``: ``deepspeed.initialize``
behind the Strategy interface); :mod:`~accel_parallel.deepspeed.plugin` (Accelerate's
``DeepSpeedPlugin``), :mod:`~accel_parallel.deepspeed.config` (the config's ``"auto"``
values), :mod:`~accel_parallel.deepspeed.json` (``HfDeepSpeedConfig``),
:mod:`~accel_parallel.deepspeed.dummies` (``DummyOptim`` / ``DummyScheduler``),
:mod:`~accel_parallel.deepspeed.precision`, :mod:`~accel_parallel.deepspeed.runtime` (the
lazy DeepSpeed import), :mod:`~accel_parallel.deepspeed.checkpoint` and
:mod:`~accel_parallel.deepspeed.states` (ZeRO checkpoints), and
:mod:`~accel_parallel.deepspeed.compat` (helper names other libraries import). The real
``deepspeed`` library is imported by absolute name, only when a run uses it; the names
below load on first use, so importing one of these modules does not load the strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel._lazy import lazy_getattr

__all__ = ["DeepSpeedStrategy", "EngineScheduler"]

__getattr__ = lazy_getattr(__name__, dict.fromkeys(__all__, "accel_parallel.deepspeed.strategy"))

if TYPE_CHECKING:
    from accel_parallel.deepspeed.strategy import DeepSpeedStrategy, EngineScheduler

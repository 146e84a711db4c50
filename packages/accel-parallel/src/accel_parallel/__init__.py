"""accel-parallel: how a model is spread over processes (single device, DDP, ...).

Strategies are looked up by name in :data:`STRATEGIES` (entry-point group
``accel.strategies``); the built-ins register through the same entry points as
third-party strategies.
"""

from __future__ import annotations

from accel_parallel.ddp import DDPCommunicationHookType, DDPStrategy, DistributedDataParallelKwargs
from accel_parallel.single import SingleDeviceStrategy
from accel_parallel.strategy import STRATEGIES, Strategy, SupportsNoSync
from accel_parallel.unwrap import extract_model_from_parallel, is_sharded_model

__version__ = "0.1.1"

__all__ = [
    "DDPCommunicationHookType", "DDPStrategy", "DistributedDataParallelKwargs", "STRATEGIES",
    "SingleDeviceStrategy", "Strategy", "SupportsNoSync", "extract_model_from_parallel",
    "is_sharded_model",
]

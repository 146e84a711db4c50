"""accel-parallel: how a model is spread over processes (single device, DDP, ...).

Strategies are looked up by name in :data:`STRATEGIES` (entry-point group
``accel.strategies``) and chosen from the resolved configuration by
:func:`select_strategy`; the built-ins register through the same entry points as
third-party strategies. The interface is :class:`Strategy` (docs/architecture.md).
"""

from __future__ import annotations

from accel_parallel.compile import (
    DynamoBackend,
    TorchDynamoPlugin,
    compile_regions,
    get_module_children_bottom_up,
    has_compiled_regions,
    is_compiled_module,
    recursive_getattr,
)
from accel_parallel.ddp import DDPCommunicationHookType, DDPStrategy, DistributedDataParallelKwargs
from accel_parallel.fsdp import FSDP2Strategy
from accel_parallel.fsdp_plugin import FullyShardedDataParallelPlugin
from accel_parallel.rebind import parameter_moves, rebind_optimizer
from accel_parallel.selection import StrategyConfig, select_strategy
from accel_parallel.single import SingleDeviceStrategy
from accel_parallel.strategy import STRATEGIES, PrepareRequest, Strategy, SupportsNoSync
from accel_parallel.unwrap import extract_model_from_parallel, is_sharded_model

__version__ = "0.2.0"

__all__ = [
    "DDPCommunicationHookType", "DDPStrategy", "DynamoBackend", "TorchDynamoPlugin",
    "compile_regions", "get_module_children_bottom_up", "has_compiled_regions",
    "is_compiled_module", "recursive_getattr", "DistributedDataParallelKwargs", "FSDP2Strategy",
    "FullyShardedDataParallelPlugin", "STRATEGIES",
    "PrepareRequest", "SingleDeviceStrategy", "Strategy", "StrategyConfig", "SupportsNoSync",
    "extract_model_from_parallel", "is_sharded_model", "parameter_moves", "rebind_optimizer",
    "select_strategy",
]

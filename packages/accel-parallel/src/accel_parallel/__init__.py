"""accel-parallel: how a model is spread over processes (single device, DDP, ...).

Strategies are looked up by name in :data:`STRATEGIES` (entry-point group
``accel.strategies``) and chosen from the resolved configuration by
:func:`select_strategy`; the built-ins register through the same entry points as
third-party strategies. The interface is :class:`Strategy` (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from accel_parallel.nd import ParallelismStrategy
from accel_parallel.parallelism_config import (
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from accel_parallel.rebind import parameter_moves, rebind_optimizer
from accel_parallel.selection import StrategyConfig, select_strategy, strategy_handler_kinds
from accel_parallel.sequence_parallel import DeepSpeedSequenceParallelConfig
from accel_parallel.single import SingleDeviceStrategy
from accel_parallel.strategy import (
    BOUNDARY,
    NO_CONTEXT,
    STRATEGIES,
    PrepareRequest,
    Strategy,
    SupportsNoSync,
)
from accel_parallel.ulysses_data import sequence_parallel_mean
from accel_parallel.unwrap import extract_model_from_parallel, is_sharded_model

__version__ = "0.3.4"

__all__ = [
    "DDPCommunicationHookType", "DDPStrategy", "DynamoBackend", "TorchDynamoPlugin",
    "compile_regions", "get_module_children_bottom_up", "has_compiled_regions",
    "is_compiled_module", "recursive_getattr", "DistributedDataParallelKwargs", "FSDP2Strategy",
    "FullyShardedDataParallelPlugin", "STRATEGIES", "ParallelismConfig", "ParallelismStrategy",
    "TorchContextParallelConfig", "TorchTensorParallelConfig", "TorchTensorParallelPlugin",
    "PrepareRequest", "SingleDeviceStrategy", "Strategy", "StrategyConfig", "SupportsNoSync",
    "extract_model_from_parallel", "is_sharded_model", "parameter_moves", "rebind_optimizer",
    "select_strategy", "strategy_handler_kinds", "DeepSpeedPlugin", "DeepSpeedStrategy", "DummyOptim", "DummyScheduler",
    "HfDeepSpeedConfig", "DeepSpeedSequenceParallelConfig", "NO_CONTEXT", "BOUNDARY",
    "sequence_parallel_mean",
]

# DeepSpeed's names load on first use (PEP 562): `import accel` does not pay for them
_LAZY = {"DeepSpeedStrategy": "accel_parallel.deepspeed",
         "DummyOptim": "accel_parallel.deepspeed_dummies",
         "DummyScheduler": "accel_parallel.deepspeed_dummies",
         "DeepSpeedPlugin": "accel_parallel.deepspeed_plugin",
         "HfDeepSpeedConfig": "accel_parallel.deepspeed_json"}

if TYPE_CHECKING:
    from accel_parallel.deepspeed import DeepSpeedStrategy
    from accel_parallel.deepspeed_dummies import DummyOptim, DummyScheduler
    from accel_parallel.deepspeed_json import HfDeepSpeedConfig
    from accel_parallel.deepspeed_plugin import DeepSpeedPlugin


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_parallel' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

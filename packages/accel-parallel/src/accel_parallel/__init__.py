"""accel-parallel: how a model is spread over processes (single device, DDP, ...).

Strategies are looked up by name in :data:`STRATEGIES` (entry-point group
``accel.strategies``) and chosen from the resolved configuration by
:func:`select_strategy`; the built-ins register through the same entry points as
third-party strategies. The interface is :class:`Strategy` (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel._lazy import lazy_getattr
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
from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin
from accel_parallel.fsdp.strategy import FSDP2Strategy
from accel_parallel.mesh.parallelism_config import (
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from accel_parallel.mesh.sequence_parallel import DeepSpeedSequenceParallelConfig
from accel_parallel.mesh.strategy import ParallelismStrategy
from accel_parallel.mesh.ulysses_data import sequence_parallel_mean
from accel_parallel.rebind import parameter_moves, rebind_optimizer
from accel_parallel.selection import (
    StrategyConfig,
    resolve_name,
    select_strategy,
    strategy_classes,
    strategy_handler_kinds,
    strategy_presets,
)
from accel_parallel.single import SingleDeviceStrategy
from accel_parallel.strategy import (
    BOUNDARY,
    NO_CONTEXT,
    STRATEGIES,
    PrepareRequest,
    Strategy,
    SupportsNoSync,
)
from accel_parallel.strategy_options import StrategyPreset
from accel_parallel.unwrap import extract_model_from_parallel, is_sharded_model

__version__ = "0.3.6"

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
    "sequence_parallel_mean", "StrategyPreset", "resolve_name",
    "strategy_classes", "strategy_presets",
]

# DeepSpeed's names load on first use (PEP 562): `import accel` does not pay for them
_LAZY = {"DeepSpeedStrategy": "accel_parallel.deepspeed.strategy",
         "DummyOptim": "accel_parallel.deepspeed.dummies",
         "DummyScheduler": "accel_parallel.deepspeed.dummies",
         "DeepSpeedPlugin": "accel_parallel.deepspeed.plugin",
         "HfDeepSpeedConfig": "accel_parallel.deepspeed.json"}

__getattr__ = lazy_getattr(__name__, _LAZY)

if TYPE_CHECKING:
    from accel_parallel.deepspeed.dummies import DummyOptim, DummyScheduler
    from accel_parallel.deepspeed.json import HfDeepSpeedConfig
    from accel_parallel.deepspeed.plugin import DeepSpeedPlugin
    from accel_parallel.deepspeed.strategy import DeepSpeedStrategy

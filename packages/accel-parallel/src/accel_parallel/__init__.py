"""accel-parallel: how a model is spread over processes (single device, DDP, ...).

Strategies are looked up by name in :data:`STRATEGIES` (entry-point group
``accel.strategies``) and chosen from the resolved configuration by
:func:`select_strategy`; the built-ins register through the same entry points as
third-party strategies. The interface is :class:`Strategy` (docs/architecture.md).

Every name loads on first use (PEP 562): ``import accel`` pays for the strategy interface
only, and a backend's modules (DDP, FSDP2, the mesh, compile, DeepSpeed) load when it is
selected or one of its names is used. Type checkers see the real imports below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel._lazy import lazy_getattr

__version__ = "0.3.7"

# module -> the public names it defines
_MODULES = {
    "accel_parallel.compile": (
        "DynamoBackend", "TorchDynamoPlugin", "compile_regions", "get_module_children_bottom_up",
        "has_compiled_regions", "is_compiled_module", "recursive_getattr"),
    "accel_parallel.ddp": (
        "DDPCommunicationHookType", "DDPStrategy", "DistributedDataParallelKwargs"),
    "accel_parallel.fsdp.plugin": ("FullyShardedDataParallelPlugin",),
    "accel_parallel.fsdp.strategy": ("FSDP2Strategy",),
    "accel_parallel.mesh.parallelism_config": (
        "ParallelismConfig", "TorchContextParallelConfig", "TorchTensorParallelConfig",
        "TorchTensorParallelPlugin"),
    "accel_parallel.mesh.sequence_parallel": ("DeepSpeedSequenceParallelConfig",),
    "accel_parallel.mesh.strategy": ("ParallelismStrategy",),
    "accel_parallel.mesh.ulysses_data": ("sequence_parallel_mean",),
    "accel_parallel.rebind": ("parameter_moves", "rebind_optimizer"),
    "accel_parallel.selection": (
        "StrategyConfig", "resolve_name", "select_strategy", "strategy_classes",
        "strategy_handler_kinds", "strategy_presets"),
    "accel_parallel.single": ("SingleDeviceStrategy",),
    "accel_parallel.strategy": (
        "BOUNDARY", "NO_CONTEXT", "STRATEGIES", "PrepareRequest", "Strategy", "SupportsNoSync"),
    "accel_parallel.strategy_options": ("StrategyPreset",),
    "accel_parallel.unwrap": ("extract_model_from_parallel", "is_sharded_model"),
    # DeepSpeed's modules import no deepspeed either; its engine loads at the first prepare
    "accel_parallel.deepspeed.strategy": ("DeepSpeedStrategy",),
    "accel_parallel.deepspeed.dummies": ("DummyOptim", "DummyScheduler"),
    "accel_parallel.deepspeed.plugin": ("DeepSpeedPlugin",),
    "accel_parallel.deepspeed.json": ("HfDeepSpeedConfig",),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "DDPCommunicationHookType", "DDPStrategy", "DynamoBackend", "TorchDynamoPlugin",
    "compile_regions", "get_module_children_bottom_up", "has_compiled_regions",
    "is_compiled_module", "recursive_getattr", "DistributedDataParallelKwargs", "FSDP2Strategy",
    "FullyShardedDataParallelPlugin", "STRATEGIES", "ParallelismConfig", "ParallelismStrategy",
    "TorchContextParallelConfig", "TorchTensorParallelConfig", "TorchTensorParallelPlugin",
    "PrepareRequest", "SingleDeviceStrategy", "Strategy", "StrategyConfig", "SupportsNoSync",
    "extract_model_from_parallel", "is_sharded_model", "parameter_moves", "rebind_optimizer",
    "select_strategy", "strategy_handler_kinds", "DeepSpeedPlugin", "DeepSpeedStrategy",
    "DummyOptim", "DummyScheduler", "HfDeepSpeedConfig", "DeepSpeedSequenceParallelConfig",
    "NO_CONTEXT", "BOUNDARY", "sequence_parallel_mean", "StrategyPreset", "resolve_name",
    "strategy_classes", "strategy_presets",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


if TYPE_CHECKING:
    from accel_parallel.compile import (
        DynamoBackend,
        TorchDynamoPlugin,
        compile_regions,
        get_module_children_bottom_up,
        has_compiled_regions,
        is_compiled_module,
        recursive_getattr,
    )
    from accel_parallel.ddp import (
        DDPCommunicationHookType,
        DDPStrategy,
        DistributedDataParallelKwargs,
    )
    from accel_parallel.deepspeed.dummies import DummyOptim, DummyScheduler
    from accel_parallel.deepspeed.json import HfDeepSpeedConfig
    from accel_parallel.deepspeed.plugin import DeepSpeedPlugin
    from accel_parallel.deepspeed.strategy import DeepSpeedStrategy
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

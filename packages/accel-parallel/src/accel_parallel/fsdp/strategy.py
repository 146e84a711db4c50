"""Fully sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Chosen when the configuration holds a :class:`FullyShardedDataParallelPlugin`
(``Accelerator(fsdp_plugin=...)`` or ``ACCELERATE_USE_FSDP=true`` with ``FSDP_*``
variables). :class:`FSDP2Strategy` is the mesh strategy (:mod:`accel_parallel.mesh.strategy`)
sized by the plugin's sharding strategy: ``dp_shard`` over every process, ``dp_replicate`` ×
``dp_shard`` for hybrid sharding, ``dp_replicate`` × a shard dimension of size 1 for
``NO_SHARD``; it goes through the mesh strategy's one order (activation checkpointing,
compile, ``fully_shard``). The precision is handed to FSDP2 as dtypes
(``MixedPrecisionPolicy``: parameters in the low dtype for compute, gradients reduced in
fp32, outputs fp32), so a bf16 FSDP2 run does not also autocast. Checkpoints are sharded
(DCP, every rank its shards), which the base :meth:`Strategy.checkpoint_format` already
says for DTensor models. What FSDP2 does to a model: :mod:`accel_parallel.fsdp.sharding`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_parallel.choosing import distributed_unmet
from accel_parallel.fsdp.sharding import (
    CheckpointedForward,
    apply_activation_checkpointing,
    ensure_process_group,
    plugin_parallelism,
)
from accel_parallel.mesh.strategy import MeshStrategy

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import PartialState

    from accel_parallel.choosing import RunEnvironment, Unmet
    from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_parallel.mesh.parallelism_config import ParallelismConfig
    from accel_parallel.selection import StrategyConfig

__all__ = ["FSDP2Strategy", "CheckpointedForward", "apply_activation_checkpointing",
           "plugin_parallelism"]


class FSDP2Strategy(MeshStrategy):
    """Shard parameters, gradients and optimizer state over the processes with FSDP2."""

    name = "fsdp"
    priority = 50
    plugin_kinds = frozenset({"fsdp"})
    #: options given by data build a FullyShardedDataParallelPlugin (when the code gave none)
    options_plugin = "fsdp"

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 plugin: FullyShardedDataParallelPlugin | None = None,
                 parallelism: ParallelismConfig | None = None, **options: Any) -> None:
        if plugin is None:
            from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
        if parallelism is None:
            parallelism = plugin_parallelism(plugin, state.num_processes)
        super().__init__(state, precision=precision, parallelism=parallelism, plugin=plugin,
                         sharding=True, **options)

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        return config.plugins.get("fsdp") is not None

    @classmethod
    def check(cls, config: StrategyConfig, environment: RunEnvironment) -> list[Unmet]:
        return distributed_unmet("FSDP2")

    @classmethod
    def options_type(cls) -> type:
        from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

        return FullyShardedDataParallelPlugin

    @classmethod
    def from_config(cls, config: StrategyConfig) -> FSDP2Strategy:
        ensure_process_group(config.state)
        return cls(config.state, precision=config.precision, plugin=config.plugins.get("fsdp"))

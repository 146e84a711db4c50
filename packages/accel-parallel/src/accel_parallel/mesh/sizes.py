"""From a configuration to the mesh's sizes and the data-parallel step they make.

:func:`resolve_parallelism` turns a ``ParallelismConfig`` (or Accelerate's deprecated
``TorchTensorParallelPlugin``) into sizes that span the world; :func:`check_plugin_agrees`
refuses an FSDP plugin whose sharding strategy describes another mesh; and
:class:`DataParallelStep` is what those sizes ask the mesh strategy
(:mod:`accel_parallel.mesh.strategy`) to end every model with. Plain data, no model is
touched here: the strategy applies it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from accel_state import ConfigurationError

from accel_parallel.fsdp.sharding import plugin_parallelism
from accel_parallel.mesh.parallelism_config import ParallelismConfig
from accel_parallel.mesh.sequence_parallel import check_sequence_parallel_runtime

if TYPE_CHECKING:
    from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

__all__ = ["DataParallelStep", "check_plugin_agrees", "resolve_parallelism"]


class DataParallelStep(str, enum.Enum):
    """The last step of :meth:`MeshStrategy.prepare_model`, chosen once from the mesh."""

    #: FSDP2 sharding over ``dp_shard`` (``dp_shard_cp`` with context parallelism)
    FSDP = "fsdp"
    #: FSDP2 over ``dp_replicate`` × ``dp_shard``: shard within a group, replicate across
    HSDP = "hsdp"
    #: FSDP2 over ``dp_replicate`` × a shard dimension of size 1: TP/CP models replicated
    #: (gradients all-reduced over the data-parallel ranks only)
    REPLICATE = "replicate"
    #: ``DistributedDataParallel`` over ``dp_replicate``: replicas and nothing else
    DDP = "ddp"
    #: one replica (tensor or context parallelism alone, or one process)
    NONE = "none"

    @property
    def uses_fsdp2(self) -> bool:
        return self in (DataParallelStep.FSDP, DataParallelStep.HSDP, DataParallelStep.REPLICATE)

    @classmethod
    def for_mesh(cls, config: ParallelismConfig, *, sharding: bool) -> DataParallelStep:
        """The step for these sizes; ``sharding``: FSDP was asked for (a plugin, or sizes that
        shard). Replicas of a TP/CP model go through FSDP2 too, as DDP cannot wrap DTensors."""
        replicas = config.dp_replicate_enabled
        if sharding or (replicas and (config.tp_enabled or config.cp_enabled)):
            if not replicas:
                return cls.FSDP
            return cls.HSDP if config.dp_shard_enabled else cls.REPLICATE
        return cls.DDP if replicas else cls.NONE


def resolve_parallelism(config: ParallelismConfig | None, tp_plugin: Any, world_size: int,
                        fsdp_plugin: FullyShardedDataParallelPlugin | None = None
                        ) -> ParallelismConfig:
    """The configuration to build the mesh from: the given one, or the TP plugin's
    (``tp_size``, the rest data-parallel replicas). An all-ones configuration on several
    processes takes the FSDP plugin's mesh when one is given, else becomes DDP over all of
    them (Accelerate's rule); any other must span exactly the world, else an error naming
    every size."""
    if config is None:
        if tp_plugin is None:
            raise ConfigurationError("internal: the N-D strategy needs a ParallelismConfig")
        config = tp_plugin.to_parallelism_config()
        if world_size % config.tp_size:
            raise ConfigurationError(
                f"TorchTensorParallelPlugin(tp_size={config.tp_size}) does not divide the "
                f"{world_size} processes; use a tp_size that divides the world size.")
        config._set_size("dp_replicate", world_size // config.tp_size)
    elif tp_plugin is not None and tp_plugin.tp_size != config.tp_size:
        raise ConfigurationError(
            f"TorchTensorParallelPlugin(tp_size={tp_plugin.tp_size}) and ParallelismConfig("
            f"tp_size={config.tp_size}) disagree; pass only the ParallelismConfig.")
    if config.total_size == 1 and world_size > 1:
        implied = plugin_parallelism(fsdp_plugin, world_size) if fsdp_plugin else None
        config._set_size("dp_replicate", implied.dp_replicate_size if implied else world_size)
        config._set_size("dp_shard", implied.dp_shard_size if implied else 1)
    config.check_world_size(world_size)
    check_sequence_parallel_runtime(config)
    config._warn_unused_handlers()
    return config


def check_plugin_agrees(config: ParallelismConfig,
                         plugin: FullyShardedDataParallelPlugin | None) -> None:
    """An FSDP plugin's sharding strategy must describe the same mesh as the sizes."""
    if plugin is None:
        return
    sizes = (f"ParallelismConfig(dp_replicate_size={config.dp_replicate_size}, "
             f"dp_shard_size={config.dp_shard_size})")
    if plugin.hybrid and not (config.dp_replicate_enabled and config.dp_shard_enabled):
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy={plugin.sharding!r}) replicates "
            f"across groups of shards, but {sizes} is not hybrid; set both sizes above 1, or use "
            "sharding_strategy='FULL_SHARD'.")
    if plugin.replicate_only and config.dp_shard_size > 1:
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy='NO_SHARD') does not shard, but "
            f"{sizes} shards over {config.dp_shard_size} processes; set dp_shard_size=1 or "
            "use sharding_strategy='FULL_SHARD'.")
    if not plugin.replicate_only and not config.fsdp_enabled and config.total_size > 1:
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy={plugin.sharding!r}) shards, but "
            f"{sizes} leaves nothing to shard over (dp_shard_size=1, cp_size=1); set "
            "dp_shard_size > 1, or drop the FSDP plugin.")

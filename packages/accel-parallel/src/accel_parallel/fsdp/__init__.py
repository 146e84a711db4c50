"""FSDP2: the strategy (:mod:`~accel_parallel.fsdp.strategy`, the mesh strategy sized by the
plugin), Accelerate's ``FullyShardedDataParallelPlugin`` (:mod:`~accel_parallel.fsdp.plugin`),
``fully_shard`` and its checks (:mod:`~accel_parallel.fsdp.sharding`), torch's FSDP modules
across versions (:mod:`~accel_parallel.fsdp.torch_fsdp`) and Accelerate's FSDP helper names
(:mod:`~accel_parallel.fsdp.compat`). The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel._lazy import lazy_getattr

__all__ = ["FSDP2Strategy", "CheckpointedForward", "apply_activation_checkpointing",
           "plugin_parallelism"]

__getattr__ = lazy_getattr(__name__, dict.fromkeys(__all__, "accel_parallel.fsdp.strategy"))

if TYPE_CHECKING:
    from accel_parallel.fsdp.strategy import (
        CheckpointedForward,
        FSDP2Strategy,
        apply_activation_checkpointing,
        plugin_parallelism,
    )

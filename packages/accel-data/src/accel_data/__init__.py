"""accel-data: per-rank sharding of PyTorch DataLoaders.

Layer 1 of accel: depends on ``accel_state`` and torch only. ``prepare_data_loader`` turns a
plain ``DataLoader`` into this rank's ``DataLoaderShard``; the samplers and shards it uses
are public so custom loops can build their own.
"""

from __future__ import annotations

from accel_data.adapter import DataLoaderAdapter
from accel_data.config import DataLoaderConfiguration
from accel_data.dispatcher import DataLoaderDispatcher, slice_batch
from accel_data.loaders import DataLoaderShard, DataLoaderStateMixin, UnsizedLoaderError
from accel_data.metrics import gather_for_metrics
from accel_data.prepare import prepare_data_loader
from accel_data.samplers import (
    ReplayableRandomSampler,
    SeedableRandomSampler,
    SkipBatchSampler,
    get_sampler,
)
from accel_data.iterable_shard import IterableDatasetShard
from accel_data.sharding import BatchSamplerShard
from accel_data.skip import SkipDataLoader, skip_first_batches

__version__ = "0.2.3"

__all__ = [
    "BatchSamplerShard",
    "DataLoaderAdapter",
    "DataLoaderConfiguration",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "IterableDatasetShard",
    "ReplayableRandomSampler",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "UnsizedLoaderError",
    "gather_for_metrics",
    "get_sampler",
    "prepare_data_loader",
    "skip_first_batches",
    "slice_batch",
]

"""accel-data: per-rank sharding of PyTorch DataLoaders.

Layer 1 of accel: depends on ``accel_state`` and torch only. ``prepare_data_loader`` turns a
plain ``DataLoader`` into this rank's ``DataLoaderShard``; the samplers and shards it uses
are public so custom loops can build their own.
"""

from __future__ import annotations

from accel_data.loaders import DataLoaderShard, DataLoaderStateMixin
from accel_data.prepare import prepare_data_loader
from accel_data.samplers import SeedableRandomSampler, get_sampler
from accel_data.sharding import BatchSamplerShard, IterableDatasetShard

__version__ = "0.1.0"

__all__ = [
    "BatchSamplerShard",
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "get_sampler",
    "prepare_data_loader",
]

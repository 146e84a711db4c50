"""accel-data: per-rank sharding of PyTorch DataLoaders.

Layer 1 of accel: depends on ``accel_state`` and torch only. ``prepare_data_loader`` turns a
plain ``DataLoader`` into this rank's ``DataLoaderShard``; the samplers and shards it uses
are public so custom loops can build their own.

Every name loads on first use (PEP 562): ``import accel`` loads the configuration class
only; the loaders, samplers and dispatcher load when a loader is prepared or one of their
names is used. Type checkers see the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.4"

# module -> the public names it defines
_MODULES = {
    "accel_data.adapter": ("DataLoaderAdapter",),
    "accel_data.config": ("DataLoaderConfiguration",),
    "accel_data.dispatcher": ("DataLoaderDispatcher", "slice_batch"),
    "accel_data.loaders": ("DataLoaderShard", "DataLoaderStateMixin", "UnsizedLoaderError"),
    "accel_data.metrics": ("gather_for_metrics",),
    "accel_data.prepare": ("prepare_data_loader",),
    "accel_data.samplers": (
        "ReplayableRandomSampler", "SeedableRandomSampler", "SkipBatchSampler", "get_sampler",
    ),
    "accel_data.iterable_shard": ("IterableDatasetShard",),
    "accel_data.sharding": ("BatchSamplerShard",),
    "accel_data.skip": ("SkipDataLoader", "skip_first_batches"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


if TYPE_CHECKING:
    from accel_data.adapter import DataLoaderAdapter
    from accel_data.config import DataLoaderConfiguration
    from accel_data.dispatcher import DataLoaderDispatcher, slice_batch
    from accel_data.iterable_shard import IterableDatasetShard
    from accel_data.loaders import DataLoaderShard, DataLoaderStateMixin, UnsizedLoaderError
    from accel_data.metrics import gather_for_metrics
    from accel_data.prepare import prepare_data_loader
    from accel_data.samplers import (
        ReplayableRandomSampler,
        SeedableRandomSampler,
        SkipBatchSampler,
        get_sampler,
    )
    from accel_data.sharding import BatchSamplerShard
    from accel_data.skip import SkipDataLoader, skip_first_batches

"""Resuming mid-epoch: ``skip_first_batches`` and ``SkipDataLoader``.

A skip applies to one epoch only, the one it was asked in: after that pass the loader
yields whole epochs again (Accelerate's skipped loaders keep skipping every epoch). Map-
style loaders skip on indices, so the skipped samples are never read; iterable datasets
have no indices, so their skipped batches are read and dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader, IterableDataset

from accel_data.loaders import DataLoaderShard, carried_settings

__all__ = ["SkipDataLoader", "skip_first_batches"]


class SkipDataLoader(DataLoaderShard):
    """A ``DataLoader`` whose first pass starts after ``skip_batches`` batches.

    Takes the usual ``DataLoader`` arguments; later passes are whole epochs.
    """

    _is_accelerate_prepared = False

    def __init__(self, dataset: Any, skip_batches: int = 0, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches
        self.set_skip_batches(skip_batches)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader that yields the rest of the current epoch of ``dataloader``, then whole epochs.

    For a prepared loader the result shares its dataset, samplers and device settings,
    and finishing the pass advances the original's epoch too, so the original can be
    used for the following epochs. A plain ``DataLoader`` becomes a ``SkipDataLoader``.
    ``dataloader`` itself is not modified.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ConfigurationError(
            f"num_batches must be a non-negative int, got {num_batches!r}; pass how many "
            "batches of this epoch were already consumed.")
    if isinstance(dataloader, DataLoaderShard):
        clone = copy.copy(dataloader)
        clone._iterator = None  # never share a (persistent-workers) iterator
        clone._yielded = 0
        clone._pending_finish = None
        clone._origin = getattr(dataloader, "_origin", None) or dataloader
        clone.set_skip_batches(num_batches)
        return clone
    if not isinstance(dataloader, DataLoader):
        raise ConfigurationError(
            f"skip_first_batches expects a torch DataLoader, got {type(dataloader).__name__}.")
    kwargs = carried_settings(dataloader)
    if isinstance(dataloader.dataset, IterableDataset):
        kwargs.update(batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
    elif dataloader.batch_sampler is not None:
        kwargs.update(batch_sampler=dataloader.batch_sampler)
    else:
        kwargs.update(sampler=dataloader.sampler, batch_size=None)
    return SkipDataLoader(dataloader.dataset, skip_batches=num_batches, **kwargs)

"""``DataLoaderShard``: a real ``torch.utils.data.DataLoader`` that iterates one rank's shard.

It adds three things to a plain loader, at near-zero per-batch cost: batches moved to the
target device, an epoch counter forwarded to samplers and datasets (``set_epoch``), and a
one-batch look-ahead so ``end_of_dataloader`` is True while the last batch is processed
(gradient accumulation must sync on it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from accel_state.state import GradientState
from accel_state.operations import send_to_device
from torch.utils.data import DataLoader

from accel_data.samplers import get_sampler

__all__ = ["DataLoaderStateMixin", "DataLoaderShard"]


class DataLoaderStateMixin:
    """Iteration state a training loop reads: ``end_of_dataloader`` and ``remainder``.

    ``begin()``/``end()`` bracket every pass; they are the single place where a loader
    reports itself to the process-wide ``GradientState``.
    """

    end_of_dataloader: bool = False
    remainder: int = -1  # samples in the last global batch that are not padding (-1: unknown)

    def reset(self) -> None:
        """Forget the previous pass."""
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        """A pass starts: become the active dataloader, reset, compute ``remainder``."""
        self.reset()
        GradientState()._add_dataloader(self)
        if getattr(self, "_drop_last_source", False):
            return
        try:
            total = self.total_dataset_length  # type: ignore[attr-defined]
            per_step = self.total_batch_size  # type: ignore[attr-defined]
        except TypeError:  # unsized dataset
            return
        if per_step:
            self.remainder = total % per_step

    def end(self) -> None:
        """A pass ended (exhausted or abandoned): the enclosing loader, if any, is active again."""
        GradientState()._remove_dataloader(self)


class DataLoaderShard(DataLoaderStateMixin, DataLoader):
    """A ``DataLoader`` over one rank's shard that moves each batch to ``device``.

    Built like any ``DataLoader`` (``dataset`` plus the usual keyword arguments, typically a
    ``BatchSamplerShard`` as ``batch_sampler`` or an ``IterableDatasetShard`` as
    ``dataset``); ``prepare_data_loader`` builds one from an existing loader. With
    ``device=None`` batches are left where the workers made them.
    """

    _is_accelerate_prepared = True

    def __init__(self, dataset: Any, device: torch.device | str | None = None,
                 non_blocking: bool = False, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.device = torch.device(device) if device is not None else None
        self.non_blocking = bool(non_blocking)
        self.iteration = 0  # epoch of the next pass; advanced after each complete pass
        self._drop_last_source = self._source_drop_last()

    def _source_drop_last(self) -> bool:
        """Whether the sharded source drops the incomplete end (then nothing is padded)."""
        source = self.batch_sampler if self.batch_sampler is not None else self.sampler
        for obj in (self.dataset, source):
            if hasattr(obj, "num_processes") and hasattr(obj, "drop_last"):
                return bool(obj.drop_last)
        return bool(getattr(source, "drop_last", self.drop_last))

    def _shard(self) -> Any:
        """The ``BatchSamplerShard``/``IterableDatasetShard`` inside, or ``None``."""
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        for _ in range(32):
            if node is None or hasattr(node, "num_processes"):
                return node
            node = getattr(node, "batch_sampler", None)
        return None

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step across all ranks (``None`` when it cannot be known)."""
        shard = self._shard()
        if shard is None and hasattr(self.dataset, "total_batch_size"):
            shard = self.dataset
        if shard is not None:
            return shard.total_batch_size
        if self.batch_sampler is not None:
            return getattr(self.batch_sampler, "batch_size", None)
        return getattr(self.sampler, "batch_size", 1)  # batch_size=None: one item per step

    @property
    def total_dataset_length(self) -> int:
        """Length of the dataset before sharding (``TypeError`` if unsized)."""
        total = getattr(self.dataset, "total_length", None)
        return total if total is not None else len(self.dataset)

    def get_sampler(self) -> Any:
        """The index sampler (see :func:`accel_data.get_sampler`)."""
        return get_sampler(self)

    def set_sampler(self, sampler: Any) -> None:
        """Replace the index sampler under the (sharded) batch sampler."""
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        while getattr(node, "batch_sampler", None) is not None:
            node = node.batch_sampler
        if not hasattr(node, "sampler"):
            raise ConfigurationError(
                f"Cannot replace the sampler of this loader: its {type(node).__name__} holds no "
                "`sampler` attribute; build a new DataLoader with the sampler instead.")
        node.sampler = sampler

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the next pass on the samplers and the dataset that take one."""
        self.iteration = epoch
        done: list[Any] = []
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        targets = []
        for _ in range(32):
            targets.append(node)
            node = getattr(node, "batch_sampler", None)
            if node is None:
                break
        targets += [get_sampler(self), self.dataset]
        for obj in targets:
            if hasattr(obj, "set_epoch") and not any(obj is seen for seen in done):
                obj.set_epoch(epoch)
                done.append(obj)

    def __iter__(self) -> Iterator[Any]:
        self.set_epoch(self.iteration)
        self.begin()
        try:
            iterator = super().__iter__()
            try:
                current = next(iterator)
            except StopIteration:
                self.iteration += 1
                return
            device = self.device
            if device is None:
                for upcoming in iterator:
                    yield current
                    current = upcoming
            else:
                non_blocking = self.non_blocking
                # Move before fetching the next batch, so an asynchronous copy overlaps it.
                current = send_to_device(current, device, non_blocking)
                for upcoming in iterator:
                    yield current
                    current = send_to_device(upcoming, device, non_blocking)
            self.end_of_dataloader = True
            yield current
            self.iteration += 1
        finally:
            self.end()

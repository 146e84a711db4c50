"""``IterableDatasetShard``: one rank's items of an iterable dataset, read in rounds.

Every rank reads the same stream and keeps its slice of each round, so no communication
is needed while iterating; with ``even_batches`` the last round is completed with the
epoch's first items (see :mod:`accel_data.sharding` for the sampler-side twin).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from torch.utils.data import IterableDataset

from accel_data.shard_checks import check_split, check_world, wrap_around

__all__ = ["IterableDatasetShard"]


class IterableDatasetShard(IterableDataset):
    """The items of an iterable ``dataset`` that belong to rank ``process_index``.

    Items are read in rounds of ``batch_size * num_processes`` (``batch_size`` with
    ``split_batches``, where it is the total batch size) and each rank keeps its contiguous
    slice of every round, i.e. one batch. The last, incomplete round is dropped with
    ``drop_last`` and otherwise completed with the first items of the epoch, so every rank
    yields the same number of full batches. Every rank must iterate the same items in the
    same order. ``even_batches=False`` keeps the last round as it is instead: ranks get a
    shorter slice of it, or none.
    """

    def __init__(self, dataset: Iterable[Any], batch_size: int = 1, drop_last: bool = False,
                 num_processes: int = 1, process_index: int = 0,
                 split_batches: bool = False, even_batches: bool = True) -> None:
        check_world(num_processes, process_index)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(
                f"IterableDatasetShard needs a positive int batch_size, got {batch_size!r}; "
                "pass the DataLoader's batch size.")
        if split_batches:
            check_split(batch_size, num_processes, "IterableDatasetShard")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = bool(split_batches)
        self.even_batches = bool(even_batches)
        self.epoch = 0
        self.padded_real = 0  # as BatchSamplerShard.padded_real (0: last round was full)
        # As BatchSamplerShard.start, counted in batches of the loader's batch size: items of
        # that many batches are read and left out before the rounds are dealt.
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and forward it to the dataset when it reshuffles per epoch."""
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    @property
    def total_batch_size(self) -> int:
        """Items per round across all ranks."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def process_batch_size(self) -> int:
        """Items per round for this rank (the per-rank batch size)."""
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    @property
    def total_length(self) -> int:
        """Length of the wrapped dataset (``TypeError`` when it has none)."""
        return len(self.dataset)  # type: ignore[arg-type]

    def __len__(self) -> int:
        total = self.total_length
        if self.start and not self.split_batches:
            total = max(total - self.start * self.process_batch_size, 0)
        if not self.even_batches and not self.drop_last:
            full, rest = divmod(total, self.total_batch_size)
            lo = self.process_index * self.process_batch_size
            return full * self.process_batch_size + max(0, min(self.process_batch_size,
                                                                rest - lo))
        rounds = total / self.total_batch_size
        rounds = math.floor(rounds) if self.drop_last else math.ceil(rounds)
        return rounds * self.process_batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if isinstance(generator, torch.Generator) and not hasattr(self.dataset, "set_epoch"):
            generator.manual_seed(self.epoch)  # Accelerate's: a dataset shuffling by itself
        round_size = self.total_batch_size
        lo = self.process_index * self.process_batch_size
        hi = lo + self.process_batch_size
        head: list[Any] | None = None
        buffer: list[Any] = []
        self.padded_real = 0
        items: Iterable[Any] = self.dataset
        if self.start and not self.split_batches:
            items, head = self._after_start(round_size)
        for item in items:
            buffer.append(item)
            if len(buffer) == round_size:
                yield from buffer[lo:hi]
                if head is None:
                    head = buffer
                buffer = []
        if buffer and not self.drop_last and not self.even_batches:
            self.padded_real = len(buffer)  # a short final step, not padded
            yield from buffer[lo:hi]
        elif buffer and not self.drop_last:
            if not head:
                head = list(buffer)
            self.padded_real = len(buffer)
            buffer.extend(wrap_around(head, 0, round_size - len(buffer)))
            yield from buffer[lo:hi]

    def _after_start(self, round_size: int) -> tuple[Iterator[Any], list[Any]]:
        """The dataset's items after the first ``start`` batches, and the epoch's first
        ``round_size`` items (the padding source, read whether left out or not)."""
        items = iter(self.dataset)
        left_out = self.start * self.process_batch_size
        prefix = list(itertools.islice(items, max(left_out, round_size)))
        return itertools.chain(prefix[left_out:], items), prefix[:round_size]

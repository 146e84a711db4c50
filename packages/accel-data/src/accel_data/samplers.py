"""Samplers whose order every rank can reproduce, and finding the sampler inside a loader.

Sharding by index only works when every rank draws the *same* permutation; a plain
``RandomSampler`` draws its seed from each process's global RNG. ``SeedableRandomSampler``
derives each epoch's permutation from ``(seed, epoch)`` alone, which also makes a resumed
run shuffle exactly as the interrupted one did.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

__all__ = ["SeedableRandomSampler", "SkipBatchSampler", "get_sampler"]

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15  # odd 64-bit constant: spreads consecutive epochs apart
_LOADER_SALT = 0xD1B54A32D192ED03  # keeps the loader's stream apart from the sampler's


def draw_seed() -> int:
    """One draw from the global torch RNG (as torch's own samplers draw their seeds)."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def pass_seed(seed: int, epoch: int) -> int:
    """Seed of a prepared loader's own generator for ``epoch`` (worker base seeds).

    A splitmix64 finaliser over ``(seed, epoch)``: differs per epoch and from the
    sampler's permutation seed of the same epoch.
    """
    z = (int(seed) + _LOADER_SALT + int(epoch) * _GOLDEN64) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) & ((1 << 63) - 1)


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose permutation depends only on ``(data_seed, epoch)``.

    ``set_epoch(epoch)`` selects the permutation; after a complete pass the epoch advances
    by one by itself, so a loop that never calls ``set_epoch`` still reshuffles each epoch.
    The seed is ``data_seed`` if given, else ``generator.initial_seed()`` if a generator is
    given, else ``torch.initial_seed()``. The generator itself is never advanced.
    """

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: torch.Generator | None = None,
                 data_seed: int | None = None) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples,
                         generator=generator)
        if data_seed is None:
            data_seed = generator.initial_seed() if generator is not None else torch.initial_seed()
        self.initial_seed = int(data_seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` for the next pass."""
        self.epoch = int(epoch)

    def epoch_seed(self, epoch: int | None = None) -> int:
        """The generator seed of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else int(epoch)
        return (self.initial_seed + epoch * _GOLDEN64) & _MASK64

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.epoch_seed())
        size, total = len(self.data_source), self.num_samples
        if self.replacement:
            yield from torch.randint(size, (total,), generator=generator).tolist()
        else:
            full, rest = divmod(total, size) if size else (0, 0)
            for _ in range(full):
                yield from torch.randperm(size, generator=generator).tolist()
            if rest:
                yield from torch.randperm(size, generator=generator)[:rest].tolist()
        self.epoch += 1


class SkipBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` after its first ``skip_batches`` (indices only).

    Skipping happens on indices, so the skipped samples are never read. ``keep_first``
    batches are yielded before the skipped range starts (the dispatcher keeps the first
    round of an epoch, the source of even-batches padding). Every pass skips again: a
    prepared loader wraps its sampler in one only for the pass it resumes.
    """

    def __init__(self, batch_sampler: Any, skip_batches: int = 0, keep_first: int = 0) -> None:
        # BatchSampler.__init__ is not called: this only wraps an existing batch sampler.
        self.batch_sampler = batch_sampler
        self.skip_batches = int(skip_batches)
        self.keep_first = int(keep_first)

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def batch_size(self) -> Any:
        return getattr(self.batch_sampler, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        return bool(getattr(self.batch_sampler, "drop_last", False))

    def __iter__(self) -> Iterator[Any]:
        lo, hi = self.keep_first, self.keep_first + self.skip_batches
        for index, batch in enumerate(self.batch_sampler):
            if not lo <= index < hi:
                yield batch

    def __len__(self) -> int:
        total = len(self.batch_sampler)
        return total - max(0, min(self.skip_batches, total - self.keep_first))

    @property
    def total_length(self) -> int:
        """Batches of the wrapped sampler, skipped ones included."""
        return len(self.batch_sampler)


def get_sampler(dataloader: DataLoader) -> Any:
    """The index sampler of ``dataloader``, looking through batch-sampler wrappers.

    For a loader without a batch sampler (``batch_size=None``) that is ``dataloader.sampler``;
    otherwise the ``sampler`` of the innermost batch sampler (``None`` for a custom batch
    sampler that has none).
    """
    node = dataloader.batch_sampler
    if node is None:
        node = dataloader.sampler
        if not isinstance(node, BatchSampler) and getattr(node, "batch_sampler", None) is None:
            return node
    for _ in range(32):  # unwrap shard/skip wrappers; bounded against self-references
        inner = getattr(node, "batch_sampler", None)
        if inner is None or inner is node:
            break
        node = inner
    return getattr(node, "sampler", None)

"""Samplers whose order every rank can reproduce, and finding the sampler inside a loader.

Sharding by index only works when every rank draws the *same* permutation. Accelerate
gets that either from a ``SeedableRandomSampler`` (``use_seedable_sampler``: each epoch's
permutation follows from ``seed + epoch``) or from one generator per loader, seeded alike on
every rank. Both draw exactly as Accelerate 1.15 does (``tests/test_order_golden.py``);
``ReplayableRandomSampler`` is torch's own sampler that also lets a resumed pass redraw
its permutation.
"""

from __future__ import annotations

import base64
import copy
from contextlib import contextmanager
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

__all__ = ["ReplayableRandomSampler", "SeedableRandomSampler", "SkipBatchSampler",
           "get_sampler"]


def draw_seed() -> int:
    """One draw from the global torch RNG (as torch's own samplers draw their seeds)."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def encode_draw(draw: Any) -> Any:
    """A ``ReplayableRandomSampler.pass_state`` as JSON data (a generator state: base64)."""
    if isinstance(draw, torch.Tensor):
        return base64.b64encode(bytes(draw.contiguous().tolist())).decode("ascii")
    return int(draw)


def decode_draw(data: Any) -> Any:
    """The inverse of :func:`encode_draw`."""
    if isinstance(data, str):
        raw = bytearray(base64.b64decode(data))
        return torch.frombuffer(raw, dtype=torch.uint8).clone()
    return int(data)


@contextmanager
def keep_rng(generator: torch.Generator | None) -> Iterator[None]:
    """Undo whatever the block draws from ``generator`` (``None``: the global CPU RNG)."""
    state = torch.get_rng_state() if generator is None else generator.get_state()
    try:
        yield
    finally:
        if generator is None:
            torch.set_rng_state(state)
        else:
            generator.set_state(state)


def _default_generator() -> torch.Generator:
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else "cpu"
    return torch.Generator(device=device)


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose permutation of epoch ``e`` is drawn after seeding its
    generator with ``initial_seed + e`` (Accelerate's rule, so the same seed gives the same
    order as Accelerate, on every rank and on resume).

    ``initial_seed`` is ``data_seed`` if given, else ``torch.initial_seed()`` now. The
    generator is the one given (it is re-seeded every pass, as in Accelerate), else one made
    on first use. ``set_epoch(epoch)`` selects the permutation; after a complete pass the
    epoch advances by one by itself.
    """

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: torch.Generator | None = None,
                 data_seed: int | None = None) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples,
                         generator=generator)
        self.initial_seed = int(data_seed) if data_seed is not None else torch.initial_seed()
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` for the next pass."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = _default_generator()
        self.generator.manual_seed(self.epoch + self.initial_seed)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)


class ReplayableRandomSampler(RandomSampler):
    """A ``RandomSampler`` that draws exactly as torch's does (one seed from the global RNG
    per pass, or its generator as it stands) and remembers what it drew from, so a resumed
    pass can redraw the very same permutation (``replay``) without consuming anything.

    ``pass_state`` is the seed drawn (no generator) or the generator's state (a tensor)
    at the start of the latest pass.
    """

    pass_state: Any = None
    _replay: Any = None

    def replay(self, state: Any) -> None:
        """Make the next pass draw from ``state`` (a ``pass_state``) instead."""
        self._replay = state

    def __iter__(self) -> Iterator[int]:
        replay, self._replay = self._replay, None
        view = copy.copy(self)
        if replay is None and self.generator is None:
            replay = draw_seed()
        if isinstance(replay, int):
            self.pass_state = replay
            view.generator = torch.Generator()
            view.generator.manual_seed(replay)
        elif self.generator is None:  # a pass drawn by a sampler that had a generator (a
            # state saved by several processes, resumed by one): redraw it on a copy
            self.pass_state = replay
            view.generator = torch.Generator()
            view.generator.set_state(replay)
        else:
            if replay is not None:
                self.generator.set_state(replay)
            self.pass_state = self.generator.get_state()
        yield from RandomSampler.__iter__(view)


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

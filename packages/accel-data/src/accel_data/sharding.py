"""Per-rank shards of a batch sampler (``BatchSamplerShard``; an iterable dataset's:
:mod:`accel_data.iterable_shard`).

Every rank runs the same sampler (same order, same length) and keeps only its part, so
no communication is needed while iterating. With ``even_batches`` the ranks stay in
lockstep: the short end of an epoch is completed with the first samples of the same
epoch ("wrap-around" padding), which keeps collectives from hanging and every batch the
same shape. Those duplicates are deterministic, so ``gather_for_metrics`` can drop them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler

from accel_data.shard_checks import check_split, check_world, wrap_around

__all__ = ["BatchSamplerShard"]


class BatchSamplerShard(BatchSampler):
    """The batches of ``batch_sampler`` that belong to rank ``process_index``.

    * ``split_batches=False``: rank ``r`` takes batches ``r, r+N, r+2N, ...`` (batch size per
      rank = the sampler's batch size).
    * ``split_batches=True``: every batch is cut into ``N`` equal slices and rank ``r`` takes
      slice ``r`` (the sampler's batch size is the total across ranks).

    With ``even_batches=True`` every rank yields the same number of full batches: the last,
    incomplete round is completed with the first samples of the epoch. With
    ``even_batches=False`` a rank may get one batch fewer, or a shorter last batch. When the
    sampler has ``drop_last=True`` only complete rounds are kept (every rank gets the same
    number of full batches, nothing is duplicated).

    ``batch_sampler`` may be any iterable of index lists; its ``batch_size`` attribute is
    only needed for ``split_batches``. Without one (batches of varying size) ``even_batches``
    completes the last round with whole batches from the start of the epoch, in turn.
    """

    def __init__(self, batch_sampler: Iterable[list[int]], num_processes: int = 1,
                 process_index: int = 0, split_batches: bool = False,
                 even_batches: bool = True) -> None:
        # BatchSampler.__init__ is not called: it insists on a torch sampler and an int
        # batch size, and this class only wraps an existing batch sampler.
        check_world(num_processes, process_index)
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = bool(split_batches)
        self.even_batches = bool(even_batches)
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        if self.split_batches:
            check_split(self.batch_size, num_processes, type(batch_sampler).__name__)

    @property
    def sampler(self) -> Any:
        """The index sampler under the wrapped batch sampler (``None`` if it has none)."""
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        """Number of batches of the wrapped batch sampler (all ranks together)."""
        return len(self.batch_sampler)  # type: ignore[arg-type]

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step across all ranks (``None`` when the sampler has no batch size)."""
        if self.batch_size is None:
            return None
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    def __len__(self) -> int:
        total = self.total_length
        if self.split_batches:
            return self._split_len(total)
        total = max(total - self.start, 0)
        rounds, rest = divmod(total, self.num_processes)
        if rest == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < rest else 0)

    def _split_len(self, total: int) -> int:
        if self.drop_last or self.even_batches or total == 0:
            return total
        # Uneven split: the short last batch may not reach this rank's slice, and then this
        # rank has one batch less (Accelerate counts it anyway; an exact count keeps
        # collectives per batch from hanging). Its size is known when the sampler exposes a
        # sized index sampler (torch's BatchSampler does); otherwise assume it does.
        try:
            last = len(self.sampler) % self.batch_size  # type: ignore[arg-type,operator]
        except TypeError:
            return total
        slice_len = self.batch_size // self.num_processes  # type: ignore[operator]
        if last == 0 or last > slice_len * self.process_index:
            return total
        return total - 1

    # Real samples in the last global batch of the latest pass when it was short (padded,
    # or with ``even_batches=False`` not), else 0: what ``gather_for_metrics`` keeps of
    # that batch, as Accelerate's ``remainder``. Set as the pass ends.
    padded_real: int = 0
    #: Batches of the wrapped sampler that the next passes leave out before dealing the rest
    #: round-robin (``split_batches=False`` only). A prepared loader sets it for the one pass
    #: that resumes a position saved by another number of processes, when that position is
    #: not a whole number of this world's rounds. Padding still comes from the epoch's start.
    start: int = 0

    def __iter__(self) -> Iterator[list[int]]:
        self.padded_real = 0
        return self._iter_split() if self.split_batches else self._iter_strided()

    def _iter_strided(self) -> Iterator[list[int]]:
        if type(self.batch_sampler) is BatchSampler and self.batch_size:
            return self._iter_strided_indices()
        if self.batch_size is None and self.even_batches and not self.drop_last:
            return self._iter_strided_varying()
        return self._iter_strided_batches()

    def _iter_strided_varying(self) -> Iterator[list[int]]:
        """Even batches from a sampler of varying-size batches (no ``batch_size``): a batch
        cannot be topped up to a size nobody knows, so the ranks left without a batch in
        the last round take the epoch's first batches, cycling (Accelerate's rule)."""
        num, rank = self.num_processes, self.process_index
        head: list[list[int]] = []  # the epoch's first batches, the wrap-around source
        last_round: list[list[int]] = []
        count = 0
        for count, batch in enumerate(self._after_start(head, None), start=1):
            if len(head) < num:
                head.append(batch)
            position = (count - 1) % num
            last_round = [batch] if position == 0 else [*last_round, batch]
            if position == rank:
                yield batch
        rest = count % num
        if count == 0 or rest == 0:
            return
        self.padded_real = sum(len(batch) for batch in last_round)
        if rank >= rest:
            yield head[(rank - rest) % len(head)]

    def _iter_strided_indices(self) -> Iterator[list[int]]:
        """Fast path for torch's ``BatchSampler``: slice this rank's batches out of the epoch's
        index list instead of building every rank's batches (same result as the general path).
        """
        num, rank, size = self.num_processes, self.process_index, self.batch_size or 0
        indices = list(self.batch_sampler.sampler)  # type: ignore[attr-defined]
        head = indices[:num * size]  # the wrap-around source: the epoch's first samples
        if self.start:
            indices = indices[self.start * size:]
        total = len(indices)
        batches = total // size if self.drop_last else -(-total // size)
        if batches == 0:
            return
        pad = self.even_batches and not self.drop_last
        short_last = pad and total % size != 0
        if not pad and not self.drop_last:  # a short final step keeps its real rows only
            real = total - (batches - 1) // num * num * size
            self.padded_real = real if real < num * size else 0
        rounds = batches // num if batches % num == 0 and not short_last else (batches - 1) // num
        for first in range(rank * size, rounds * num * size, num * size):
            yield indices[first:first + size]
        if rounds * num == batches or self.drop_last:
            return
        position = rounds * num + rank
        mine = indices[position * size:(position + 1) * size] if position < batches else None
        if not pad:
            if mine is not None:
                yield mine
            return
        yield from self._padded_round(batches, indices[(batches - 1) * size:], mine, head)

    def _iter_strided_batches(self) -> Iterator[list[int]]:
        num, rank = self.num_processes, self.process_index
        pad = self.even_batches and not self.drop_last
        size = self.batch_size or 0
        head: list[int] = []  # first samples of the epoch, the wrap-around source
        mine: Any = None  # this rank's batch of the current round, held until it completes
        deferred = False  # a round ended on a short batch: pad it if no batch follows
        count = rows = 0  # rows: real samples of the current round
        batch: Any = None
        for count, batch in enumerate(self._after_start(head if pad else None, num * size),
                                      start=1):
            rows = len(batch) + (rows if (count - 1) % num else 0)
            if deferred:
                yield mine
                mine, deferred = None, False
            if pad and len(head) < num * size:
                head.extend(batch)
            pos = (count - 1) % num
            if pos == rank:
                mine = batch
            if pos == num - 1:
                if pad and len(batch) < size:
                    deferred = True
                else:
                    yield mine
                    mine = None
        if not pad and not self.drop_last and count and size and rows < num * size:
            self.padded_real = rows  # a short final step, not padded
        if count == 0 or (count % num == 0 and not deferred):
            return  # empty epoch, or the last round was complete and already yielded
        if self.drop_last:
            return  # the incomplete last round is dropped on every rank
        if not pad:
            if mine is not None:
                yield mine
            return
        yield from self._padded_round(count, batch, mine, head)

    def _after_start(self, head: list[Any] | None, wanted: int | None) -> Iterator[Any]:
        """The wrapped sampler's batches after the first ``start``; those left out still
        feed ``head`` (the epoch's first samples, or with ``wanted=None`` its first
        ``num_processes`` batches), the padding source of the epoch's end."""
        batches = iter(self.batch_sampler)
        for batch in itertools.islice(batches, self.start):  # nothing when start is 0
            if head is None:
                continue
            if wanted is None and len(head) < self.num_processes:
                head.append(batch)
            elif wanted is not None and len(head) < wanted:
                head.extend(batch)
        return batches

    def _padded_round(self, count: int, last: list[int], mine: Any,
                      head: list[int]) -> Iterator[list[int]]:
        """Complete the final round (positions up to a multiple of N) with wrap-around samples."""
        num, size = self.num_processes, self.batch_size or 0
        first = (count - 1) // num * num  # index of the last round's first batch
        position = first + self.process_index  # this rank's batch index
        short = max(size - len(last), 0)
        self.padded_real = (count - 1 - first) * size + len(last)
        if position < count - 1:
            yield mine  # a full batch of the last round
        elif position == count - 1:
            yield list(last) + wrap_around(head, 0, short) if short else mine
        else:
            yield wrap_around(head, short + (position - count) * size, size)

    def _iter_split(self) -> Iterator[list[int]]:
        size = self.batch_size or 0
        width = size // self.num_processes
        lo, hi = width * self.process_index, width * (self.process_index + 1)
        head: Any = None
        for batch in self.batch_sampler:
            if head is None:
                head = batch
            if len(batch) == size:
                yield batch[lo:hi]
            elif len(batch) > size:
                raise ConfigurationError(
                    f"split_batches=True got a batch of {len(batch)} indices from a batch "
                    f"sampler whose batch_size is {size}; make the batch sampler yield at most "
                    "batch_size indices per batch.")
            elif self.drop_last:
                continue
            else:  # the short final batch: its real rows, padded or not
                self.padded_real = len(batch)
                if self.even_batches:
                    yield (list(batch) + wrap_around(head, 0, size - len(batch)))[lo:hi]
                elif len(batch) > lo:
                    yield batch[lo:hi]


def __getattr__(name: str) -> Any:
    """``IterableDatasetShard`` lived here until 0.2.2: old imports and pickles still find it."""
    if name == "IterableDatasetShard":
        from accel_data.iterable_shard import IterableDatasetShard

        return IterableDatasetShard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

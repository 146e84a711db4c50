"""BatchSamplerShard / IterableDatasetShard against an independent model of the expected order.

The model: rank r's batches, interleaved round by round (rank 0, 1, ..., N-1), must read
exactly as the underlying epoch, followed (with even batches) by the first samples of the
epoch repeated as needed. So every index is seen exactly once, and the only extra items are
the wrap-around ones.
"""

from __future__ import annotations

import itertools
import math
import pickle

import pytest
from accel_data import BatchSamplerShard, IterableDatasetShard
from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler

LENGTHS = [0, 1, 2, 3, 5, 6, 7, 12, 13, 24, 25]


def _wrapped(flat: list[int], total: int) -> list[int]:
    """``flat`` continued with its own beginning, cut to ``total`` items."""
    if not flat:
        return []
    return list(itertools.islice(itertools.cycle(flat), total))


def _interleave(per_rank: list[list[list[int]]]) -> list[int]:
    out: list[int] = []
    for k in range(max((len(b) for b in per_rank), default=0)):
        for batches in per_rank:
            if k < len(batches):
                out.extend(batches[k])
    return out


def _expected(length: int, batch_size: int, num: int, split: bool, even: bool,
              drop_last: bool) -> list[int]:
    batches = [list(range(i, min(i + batch_size, length))) for i in range(0, length, batch_size)]
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    flat = [i for b in batches for i in b]
    if split:
        return _wrapped(flat, len(batches) * batch_size) if even else flat
    if drop_last:
        return flat[: len(batches) // num * num * batch_size]
    if even:
        return _wrapped(flat, math.ceil(len(batches) / num) * num * batch_size)
    return flat


FLAGS = list(itertools.product((2, 3), (False, True), (True, False), (False, True)))


@pytest.mark.parametrize(("num", "split", "even", "drop"), FLAGS)
def test_batch_sampler_shard_covers_epoch_once(num, split, even, drop):
    # bs is the per-rank batch size; with split the sampler's batch size is bs * N.
    for length, bs in itertools.product(LENGTHS, range(1, 6)):
        _check_batch_shards(length, bs * num if split else bs, num, split, even, drop)


def _check_batch_shards(length, batch_size, num, split, even, drop):
    case = f"length={length} batch_size={batch_size}"
    sampler = BatchSampler(SequentialSampler(range(length)), batch_size, drop)
    shards = [BatchSamplerShard(sampler, num, r, split, even) for r in range(num)]
    per_rank = [list(s) for s in shards]
    assert [len(s) for s in shards] == [len(b) for b in per_rank], case  # __len__ is exact
    assert _interleave(per_rank) == _expected(length, batch_size, num, split, even, drop), case
    rank_size = batch_size // num if split else batch_size
    if even or drop:
        assert len({len(b) for b in per_rank}) <= 1, case  # same number of batches per rank
    if drop or (even and length):
        assert all(len(batch) == rank_size for b in per_rank for batch in b), case
    assert all(s.total_length == len(sampler) for s in shards), case


def test_batch_sampler_shard_documented_example():
    sampler = BatchSampler(SequentialSampler(range(11)), 3, False)
    assert list(BatchSamplerShard(sampler, 2, 1)) == [[3, 4, 5], [9, 10, 0]]
    assert list(BatchSamplerShard(sampler, 2, 1, even_batches=False)) == [[3, 4, 5], [9, 10]]
    split = BatchSampler(SequentialSampler(range(11)), 4, False)
    assert list(BatchSamplerShard(split, 2, 1, split_batches=True)) == [[2, 3], [6, 7], [10, 0]]


def test_tiny_dataset_wraps_repeatedly():
    sampler = BatchSampler(SequentialSampler(range(1)), 2, False)
    assert [list(BatchSamplerShard(sampler, 3, r)) for r in range(3)] == [[[0, 0]]] * 3


class _ListBatches:
    """A batch sampler that is not a torch BatchSampler (e.g. bucketing by length)."""

    def __init__(self, batches, batch_size=None):
        self.batches = batches
        if batch_size is not None:
            self.batch_size = batch_size

    def __iter__(self):
        return iter([list(b) for b in self.batches])

    def __len__(self):
        return len(self.batches)


def test_any_batch_sampler_without_batch_size_when_not_needed():
    batches = [[0, 1, 2], [3], [4, 5], [6, 7, 8, 9], [10]]
    shards = [BatchSamplerShard(_ListBatches(batches), 2, r, even_batches=False) for r in (0, 1)]
    assert [list(s) for s in shards] == [[[0, 1, 2], [4, 5], [10]], [[3], [6, 7, 8, 9]]]
    assert [len(s) for s in shards] == [3, 2]


def test_custom_batch_sampler_with_batch_size_pads():
    batches = [[0, 1], [2, 3], [4]]
    shards = [BatchSamplerShard(_ListBatches(batches, batch_size=2), 2, r) for r in (0, 1)]
    assert [list(s) for s in shards] == [[[0, 1], [4, 0]], [[2, 3], [1, 2]]]


def test_short_batch_mid_epoch_is_not_lost():
    # A custom sampler may end a round on a short batch that is not the epoch's last.
    batches = [[0, 1], [2], [3, 4], [5, 6]]
    shards = [BatchSamplerShard(_ListBatches(batches, batch_size=2), 2, r) for r in (0, 1)]
    assert _interleave([list(s) for s in shards]) == [0, 1, 2, 3, 4, 5, 6]


def test_varying_batches_without_batch_size_pad_with_the_first_whole_batches():
    # no batch_size: the ranks left without a batch in the last round take the epoch's
    # first batches in turn (a batch of unknown size cannot be topped up)
    sampler = _ListBatches([[0, 1, 2], [3, 4], [5, 6, 7, 8], [9], [10, 11]])
    shards = [BatchSamplerShard(sampler, 3, r) for r in range(3)]
    assert [list(s) for s in shards] == [[[0, 1, 2], [9]], [[3, 4], [10, 11]],
                                         [[5, 6, 7, 8], [0, 1, 2]]]
    assert [len(s) for s in shards] == [2, 2, 2]
    assert shards[2].padded_real == 3  # the real samples of the padded round: [9], [10, 11]
    one = [BatchSamplerShard(_ListBatches([[0, 1, 2]]), 3, r) for r in range(3)]
    assert [list(s) for s in one] == [[[0, 1, 2]]] * 3
    uneven = [BatchSamplerShard(sampler, 3, r, even_batches=False) for r in range(3)]
    assert [list(s) for s in uneven][2] == [[5, 6, 7, 8]]


def test_missing_batch_size_for_split_batches_names_the_fix():
    sampler = _ListBatches([[0, 1]])
    with pytest.raises(ConfigurationError, match="batch_size"):
        BatchSamplerShard(sampler, 2, 0, split_batches=True, even_batches=False)


def test_split_needs_divisible_batch_size():
    sampler = BatchSampler(SequentialSampler(range(10)), 5, False)
    with pytest.raises(ConfigurationError, match=r"batch size \(5\).*round multiple of the "
                       r"number of processes \(2\)") as info:
        BatchSamplerShard(sampler, 2, 0, split_batches=True)
    assert "multiple of 2, or split_batches=False" in str(info.value)  # the fix
    assert isinstance(info.value, ValueError)


def test_split_rejects_oversized_batch():
    shard = BatchSamplerShard(_ListBatches([[0, 1, 2]], batch_size=2), 2, 0, split_batches=True)
    with pytest.raises(ConfigurationError, match="3 indices"):
        list(shard)


@pytest.mark.parametrize(("num", "rank"), [(0, 0), (2, 2), (2, -1), (2.0, 0), (True, 0)])
def test_bad_world_is_rejected(num, rank):
    sampler = BatchSampler(SequentialSampler(range(4)), 2, False)
    with pytest.raises(ConfigurationError, match="num_processes|process_index"):
        BatchSamplerShard(sampler, num, rank)


def test_uneven_split_len_without_sized_sampler_is_an_upper_bound():
    shard = BatchSamplerShard(_ListBatches([[0, 1, 2, 3], [4]], batch_size=4), 2, 1,
                              split_batches=True, even_batches=False)
    assert list(shard) == [[2, 3]]
    assert len(shard) == 2  # documented: the last batch's size cannot be known up front


def test_shards_pickle():
    sampler = BatchSampler(SequentialSampler(range(7)), 2, False)
    shard = pickle.loads(pickle.dumps(BatchSamplerShard(sampler, 2, 1)))
    assert list(shard) == [[2, 3], [6, 0]]
    data = pickle.loads(pickle.dumps(IterableDatasetShard(range(5), 2, num_processes=2)))
    assert list(data) == [0, 1, 4, 0]


class _Stream(IterableDataset):
    def __init__(self, n):
        self.n = n
        self.epochs: list[int] = []

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


@pytest.mark.parametrize(("num", "split", "drop"),
                         list(itertools.product((2, 3), (False, True), (False, True))))
def test_iterable_shard_covers_stream_once(num, split, drop):
    for length, per in itertools.product(LENGTHS, range(1, 6)):  # per: items per rank per round
        case = f"length={length} per_rank={per}"
        batch_size = per * num if split else per
        shards = [IterableDatasetShard(_Stream(length), batch_size, drop, num, r, split)
                  for r in range(num)]
        per_rank = [list(s) for s in shards]
        assert [len(s) for s in shards] == [len(items) for items in per_rank], case
        assert len({len(items) for items in per_rank}) == 1, case
        chunks = [[items[i:i + per] for i in range(0, len(items), per)] for items in per_rank]
        round_size = per * num
        if drop:
            expected = list(range(length // round_size * round_size))
        else:
            expected = _wrapped(list(range(length)), math.ceil(length / round_size) * round_size)
        assert _interleave(chunks) == expected, case
        assert all(s.total_length == length and s.total_batch_size == round_size
                   for s in shards), case


def test_iterable_shard_forwards_set_epoch():
    stream = _Stream(4)
    shard = IterableDatasetShard(stream, 2, num_processes=2)
    shard.set_epoch(3)
    assert shard.epoch == 3 and stream.epochs == [3]
    IterableDatasetShard(range(3)).set_epoch(1)  # a dataset without set_epoch is fine


def test_iterable_shard_errors():
    with pytest.raises(ConfigurationError, match=r"3 is not divisible by 2"):
        IterableDatasetShard(range(4), 3, num_processes=2, split_batches=True)
    with pytest.raises(ConfigurationError, match="batch_size"):
        IterableDatasetShard(range(4), 0)
    with pytest.raises(ConfigurationError, match="process_index"):
        IterableDatasetShard(range(4), 2, num_processes=2, process_index=5)


class _SubclassedBatchSampler(BatchSampler):
    """Not exactly torch's BatchSampler: takes the general path of BatchSamplerShard."""


@pytest.mark.parametrize(("num", "even", "drop"),
                         list(itertools.product((2, 3), (True, False), (False, True))))
def test_index_fast_path_matches_general_path(num, even, drop):
    for length, bs in itertools.product(LENGTHS, range(1, 6)):
        fast = BatchSampler(SequentialSampler(range(length)), bs, drop)
        slow = _SubclassedBatchSampler(SequentialSampler(range(length)), bs, drop)
        for r in range(num):
            a, b = BatchSamplerShard(fast, num, r, False, even), BatchSamplerShard(
                slow, num, r, False, even)
            assert list(a) == list(b), (length, bs, r)
            assert a.padded_real == b.padded_real, (length, bs, r)

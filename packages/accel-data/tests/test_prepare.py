"""prepare_data_loader: the user's loader rebuilt as one rank's DataLoaderShard."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from accel_data import (
    BatchSamplerShard,
    DataLoaderShard,
    IterableDatasetShard,
    ReplayableRandomSampler,
    SeedableRandomSampler,
    get_sampler,
    prepare_data_loader,
)
from accel_state.errors import ConfigurationError
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)


def _dataset(n):
    return TensorDataset(torch.arange(n))


def _indices(loader):
    return [i for (batch,) in loader for i in batch.tolist()]


def _ranks(dataloader, num=2, **kwargs):
    return [prepare_data_loader(dataloader, num_processes=num, process_index=r, **kwargs)
            for r in range(num)]


@pytest.mark.parametrize("num", [2, 3])
def test_shuffled_shards_are_disjoint_and_cover_the_dataset(num):
    loader = DataLoader(_dataset(24), batch_size=4, shuffle=True)
    shards = _ranks(loader, num, use_seedable_sampler=True, data_seed=123)
    seen = [_indices(s) for s in shards]
    assert sorted(i for s in seen for i in s) == list(range(24))
    assert seen[0] != list(range(len(seen[0])))  # actually shuffled
    assert all(isinstance(get_sampler(s), SeedableRandomSampler) for s in shards)
    # next epoch: a new permutation, still disjoint
    again = [_indices(s) for s in shards]
    assert again != seen and sorted(i for s in again for i in s) == list(range(24))


def test_uneven_shuffled_shards_pad_with_the_epoch_start():
    loader = DataLoader(_dataset(10), batch_size=3, shuffle=True)
    shards = _ranks(loader, 2, use_seedable_sampler=True, data_seed=5)
    per_rank = [[b[0].tolist() for b in s] for s in shards]
    interleaved = [i for k in range(2) for r in range(2) for i in per_rank[r][k]]
    assert sorted(interleaved[:10]) == list(range(10))
    assert interleaved[10:] == interleaved[:2]  # the two extra items wrap around


def test_user_loader_is_left_untouched():
    loader = DataLoader(_dataset(8), batch_size=2, shuffle=True)
    sampler, batch_sampler = loader.sampler, loader.batch_sampler
    prepare_data_loader(loader, num_processes=2, process_index=0, data_seed=1)
    assert loader.sampler is sampler and loader.batch_sampler is batch_sampler
    assert type(batch_sampler.sampler) is RandomSampler


def test_single_process_is_the_plain_loader():
    loader = DataLoader(_dataset(7), batch_size=2)
    prepared = prepare_data_loader(loader)
    assert isinstance(prepared, DataLoaderShard) and isinstance(prepared, DataLoader)
    assert _indices(prepared) == list(range(7)) and len(prepared) == 4
    assert prepared.device is None and prepared.total_batch_size == 2


def test_single_process_seedable_sampler_is_reproducible():
    loader = DataLoader(_dataset(16), batch_size=4, shuffle=True)
    first = prepare_data_loader(loader, use_seedable_sampler=True, data_seed=3)
    second = prepare_data_loader(loader, use_seedable_sampler=True, data_seed=3)
    assert _indices(first) == _indices(second)
    # Without use_seedable_sampler torch's sampler stays (as in Accelerate), replayable.
    assert type(get_sampler(prepare_data_loader(loader))) is ReplayableRandomSampler


def test_carries_loader_settings_and_moves_to_device():
    def collate(items):
        return torch.stack([t for (t,) in items]) * 10

    loader = DataLoader(_dataset(6), batch_size=2, collate_fn=collate, num_workers=1,
                        pin_memory=False, timeout=30, persistent_workers=True)
    prepared = prepare_data_loader(loader, device="meta", put_on_device=True,
                                   num_processes=2, process_index=1, non_blocking=True)
    assert prepared.collate_fn is collate and prepared.num_workers == 1
    assert prepared.timeout == 30 and prepared.persistent_workers
    batches = list(prepared)
    assert [b.device.type for b in batches] == ["meta", "meta"]
    plain = prepare_data_loader(loader, num_processes=2, process_index=1)
    assert [b.tolist() for b in plain] == [[20, 30], [0, 10]]


def test_split_batches():
    loader = DataLoader(_dataset(8), batch_size=4)
    shards = _ranks(loader, 2, split_batches=True)
    assert [[b[0].tolist() for b in s] for s in shards] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert shards[0].total_batch_size == 4


def test_iterable_dataset():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(9))

    loader = DataLoader(Stream(), batch_size=2)
    shards = _ranks(loader, 2, dispatch_batches=False)  # None: dispatched (needs a group)
    assert all(isinstance(s.dataset, IterableDatasetShard) for s in shards)
    assert [[b.tolist() for b in s] for s in shards] == [
        [[0, 1], [4, 5], [8, 0]], [[2, 3], [6, 7], [1, 2]]]
    assert shards[0].total_batch_size == 4
    split = _ranks(loader, 2, split_batches=True, dispatch_batches=False)
    assert [[b.tolist() for b in s] for s in split] == [
        [[0], [2], [4], [6], [8]], [[1], [3], [5], [7], [0]]]
    unbatched = _ranks(DataLoader(Stream(), batch_size=None), 2, dispatch_batches=False)
    assert [[int(b) for b in s] for s in unbatched] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 0]]


def test_a_datasets_stream_of_enough_shards_is_split_by_its_own_shards():
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"x": list(range(10))})
    two = rows.to_iterable_dataset(num_shards=2)
    shards = _ranks(DataLoader(two, batch_size=4), 2, dispatch_batches=False)
    assert all(not isinstance(s.dataset, IterableDatasetShard) for s in shards)
    assert [[b["x"].tolist() for b in s] for s in shards] == [
        [[0, 1, 2, 3], [4]], [[5, 6, 7, 8], [9]]]  # shard r, whole, on rank r (as Accelerate)
    one = rows.to_iterable_dataset(num_shards=1)  # fewer shards than processes
    assert all(isinstance(s.dataset, IterableDatasetShard)
               for s in _ranks(DataLoader(one, batch_size=4), 2, dispatch_batches=False))
    split = _ranks(DataLoader(two, batch_size=4), 2, split_batches=True, dispatch_batches=False)
    assert all(isinstance(s.dataset, IterableDatasetShard) for s in split)


def test_batch_size_none_map_style():
    items = _ranks(DataLoader(_dataset(5), batch_size=None), 2)
    assert [[int(t[0]) for t in s] for s in items] == [[0, 2, 4], [1, 3, 0]]
    fast_path = DataLoader(list(range(10)), batch_size=None,
                           sampler=BatchSampler(SequentialSampler(range(10)), 3, False))
    shards = _ranks(fast_path, 2)
    assert isinstance(shards[0].sampler, BatchSamplerShard)
    assert [len(s) for s in shards] == [2, 2]


class _Buckets:
    """A custom batch sampler without batch_size (e.g. bucketing by length)."""

    def __iter__(self):
        return iter([[0, 1, 2], [3], [4, 5]])

    def __len__(self):
        return 3


def test_custom_batch_sampler_without_batch_size():
    loader = DataLoader(_dataset(6), batch_sampler=_Buckets())
    shards = _ranks(loader, 2, even_batches=False)
    assert [_indices(s) for s in shards] == [[0, 1, 2, 4, 5], [3]]
    with pytest.raises(ConfigurationError, match="split_batches=False"):
        _ranks(loader, 2, split_batches=True)
    even = _ranks(loader, 2)  # rank 1's missing last batch is the epoch's first one again
    assert [_indices(s) for s in even] == [[0, 1, 2, 4, 5], [3, 0, 1, 2]]


def test_custom_batch_sampler_over_random_sampler_is_copied():
    class Batches:
        def __init__(self, sampler):
            self.sampler, self.batch_size = sampler, 2

        def __iter__(self):
            indices = list(self.sampler)
            return iter([indices[i:i + 2] for i in range(0, len(indices), 2)])

        def __len__(self):
            return 4

    original = Batches(RandomSampler(range(8)))
    loader = DataLoader(_dataset(8), batch_sampler=original)
    shards = _ranks(loader, 2, use_seedable_sampler=True, data_seed=9)
    assert sorted(i for s in shards for i in _indices(s)) == list(range(8))
    assert type(original.sampler) is RandomSampler


def test_errors_name_the_fix():
    loader = DataLoader(_dataset(8), batch_size=3, shuffle=True)
    # Accelerate's type (ValueError) and sentence, then the fix
    with pytest.raises(ValueError, match=r"batch size \(3\) needs to be a round multiple of "
                       r"the number of processes \(2\)\. Use a batch size that is a multiple"):
        prepare_data_loader(loader, num_processes=2, process_index=0, split_batches=True)
    with pytest.raises(ConfigurationError, match="device="):
        prepare_data_loader(loader, put_on_device=True)
    with pytest.raises(ConfigurationError, match="process_index"):
        prepare_data_loader(loader, num_processes=2, process_index=2, data_seed=0)
    with pytest.raises(ConfigurationError, match="DataLoader"):
        prepare_data_loader([1, 2, 3])
    with pytest.raises(ConfigurationError, match="does not have the `batch_size` attribute"):
        _ranks(DataLoader(_dataset(4), batch_size=None), 2, split_batches=True)


def test_seeded_generator_stands_in_for_data_seed():
    def loader():
        return DataLoader(_dataset(12), batch_size=2, shuffle=True,
                          generator=torch.Generator().manual_seed(4))

    shards = [prepare_data_loader(loader(), num_processes=2, process_index=r) for r in (0, 1)]
    assert sorted(i for s in shards for i in _indices(s)) == list(range(12))


def test_world_is_read_from_torch_distributed(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        loader = DataLoader(_dataset(6), batch_size=2, shuffle=True)
        torch.manual_seed(42)
        drawn = int(torch.empty((), dtype=torch.int64).random_().item())
        torch.manual_seed(42)
        seeded = prepare_data_loader(loader, use_seedable_sampler=True)
        assert get_sampler(seeded).initial_seed == 42  # torch.initial_seed(), rank 0's
        half = prepare_data_loader(loader, num_processes=2)  # rank from the group
        # several processes: the sampler gets a generator seeded by one global draw
        assert get_sampler(half).generator.initial_seed() == drawn
        assert half.batch_sampler.process_index == 0 and len(half) == 2
        assert len(_indices(half)) == 4
    finally:
        dist.destroy_process_group()


def test_even_batches_can_be_switched_between_passes():
    # 5 batches of 2 over 2 ranks: padded, rank 1 repeats the start; unpadded, it stops early
    loader = DataLoader(_dataset(10), batch_size=2)
    shards = _ranks(loader, 2)
    assert [s.even_batches for s in shards] == [True, True]
    assert [len(list(s)) for s in shards] == [3, 3]
    for shard in shards:
        shard.even_batches = False
    assert [s.even_batches for s in shards] == [False, False]
    assert [_indices(s) for s in shards] == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7]]
    for shard in shards:
        shard.even_batches = True
    assert [_indices(s) for s in shards] == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 0, 1]]
    single = prepare_data_loader(loader, num_processes=1, process_index=0)
    single.even_batches = True  # nothing is sharded: nothing to pad
    assert single.even_batches is False and len(list(single)) == 5

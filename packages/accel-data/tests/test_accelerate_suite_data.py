"""Behaviour Accelerate's own test suite checks in accel-data (issue 15): loaders built with
``use_stateful_dataloader=True``, a one-process dispatcher, and a skip that survives prepare."""

from __future__ import annotations

import pickle

import pytest
import torch
from accel_data import (
    DataLoaderShard,
    SeedableRandomSampler,
    prepare_data_loader,
    skip_first_batches,
)
from accel_data.dispatcher import DataLoaderDispatcher
from accel_data.skip import SkipDataLoader
from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler, DataLoader


def test_use_stateful_dataloader_builds_the_torchdata_variant():
    pytest.importorskip("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    plain = DataLoaderShard(list(range(16)), batch_size=4)
    assert not isinstance(plain, StatefulDataLoader) and plain.use_stateful_dataloader is False
    shard = DataLoaderShard(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    assert isinstance(shard, StatefulDataLoader) and isinstance(shard, DataLoaderShard)
    assert shard.use_stateful_dataloader is True
    batches = []
    for step, batch in enumerate(shard):
        batches.append(batch.tolist())
        if step == 1:
            state = shard.state_dict()
    again = DataLoaderShard(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    again.load_state_dict(state)
    assert [b.tolist() for b in again] == batches[2:]
    skip = SkipDataLoader(list(range(16)), batch_size=4, skip_batches=2,
                          use_stateful_dataloader=True)
    assert isinstance(skip, StatefulDataLoader)
    assert [b.tolist() for b in skip] == [[8, 9, 10, 11], [12, 13, 14, 15]]


def test_dispatcher_in_one_process_needs_no_process_group():
    assert not torch.distributed.is_initialized()
    loader = DataLoaderDispatcher(list(range(16)), batch_size=4)
    ends = [loader.end_of_dataloader for _ in loader]
    assert ends == [False, False, False, True]
    assert [b.tolist() for b in loader][0] == [0, 1, 2, 3]


def test_a_skip_before_prepare_is_kept():
    loader = DataLoader(list(range(12)), batch_size=2)
    skipped = skip_first_batches(loader, 2)
    one = prepare_data_loader(skipped, num_processes=1, process_index=0)
    assert len(one) == 4 and [b.tolist() for b in one][0] == [4, 5]
    # two processes take whole batches in turn: 2 batches of the loader = 1 per process
    ranks = [prepare_data_loader(skip_first_batches(loader, 2), num_processes=2,
                                 process_index=r, data_seed=0) for r in (0, 1)]
    assert [[b.tolist() for b in r] for r in ranks] == [[[4, 5], [8, 9]], [[6, 7], [10, 11]]]
    with pytest.raises(ConfigurationError, match="multiple of 2"):
        prepare_data_loader(skip_first_batches(loader, 3), num_processes=2, process_index=0)
    split = prepare_data_loader(skip_first_batches(loader, 3), num_processes=2, process_index=1,
                                split_batches=True)
    assert [b.tolist() for b in split] == [[7], [9], [11]]


def _epochs_seen(loader_cls, skip):
    """The sampler's epoch while each batch of a pass over a skipped copy is handed out."""
    data = list(range(16))
    sampler = SeedableRandomSampler(data, data_seed=42)
    loader = loader_cls(data, batch_sampler=BatchSampler(sampler, batch_size=4, drop_last=False))
    loader.set_epoch(1)
    return [sampler.epoch for _ in skip_first_batches(loader, skip)]


@pytest.mark.parametrize("skip", [0, 2])
def test_the_dispatcher_reads_no_further_ahead_than_a_shard(skip):
    # the sampler reaches its end (and a SeedableRandomSampler its next epoch) only when
    # the last batch is handed out, not one batch before it
    seen = _epochs_seen(DataLoaderDispatcher, skip)
    assert seen == _epochs_seen(DataLoaderShard, skip)
    assert seen == [1] * (3 - skip) + [2]


def test_base_dataloader_is_the_loader_itself():
    # Accelerate's adapters wrap a DataLoader under this name; ours are the DataLoader
    built = [SkipDataLoader(list(range(16)), batch_size=4, skip_batches=2),
             DataLoaderShard(list(range(16)), batch_size=4),
             DataLoaderDispatcher(list(range(16)), batch_size=4)]
    for loader in built:
        assert loader.base_dataloader is loader and isinstance(loader.base_dataloader, DataLoader)
    with pytest.raises(AttributeError, match="instance"):
        _ = DataLoaderShard.base_dataloader


def test_dispatch_batches_gives_a_dispatcher_on_one_process_and_it_pickles():
    loader = DataLoader(torch.arange(10), batch_size=3)
    prepared = prepare_data_loader(loader, num_processes=1, process_index=0,
                                   dispatch_batches=True)
    assert isinstance(prepared, DataLoaderDispatcher)
    again = pickle.loads(pickle.dumps(prepared))
    assert isinstance(again, DataLoaderDispatcher) and len(again) == len(prepared) == 4
    assert [b.tolist() for b in again] == [b.tolist() for b in prepared] == \
        [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    skipped = pickle.loads(pickle.dumps(prepare_data_loader(
        skip_first_batches(loader, 2), num_processes=1, process_index=0, dispatch_batches=True)))
    assert isinstance(skipped, DataLoaderDispatcher) and len(skipped) == 2
    assert [b.tolist() for b in skipped] == [[6, 7, 8], [9]]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_adapters_match_torchdata_batches_and_state(num_workers):
    pytest.importorskip("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = list(range(64))

    def build(cls=None, **extra):
        kwargs = dict(batch_size=4, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(42), **extra)
        if cls is None:
            return StatefulDataLoader(data, **kwargs)
        return cls(data, use_stateful_dataloader=True, **kwargs)

    def first(loader, count):
        out = []
        for step, batch in enumerate(loader):
            out.append(batch.tolist())
            if step == count - 1:
                break
        return out

    reference = build()
    expected = first(reference, 8)
    state = reference.state_dict()
    for cls in (SkipDataLoader, DataLoaderShard, DataLoaderDispatcher):
        loader = build(cls)
        assert first(loader, 8) == expected, cls
        assert loader.state_dict() == state, cls  # torchdata's state, nothing more
        resumed = build(cls)
        resumed.load_state_dict(state)
        assert [b.tolist() for b in resumed] == [list(range(i, i + 4)) for i in range(32, 64, 4)]
    # past the first epoch accel's own position (epoch, ...) goes next to torchdata's keys
    loader = build(DataLoaderShard)
    list(loader)
    first(loader, 2)
    later = loader.state_dict()
    assert later["epoch"] == 1 and later["batches_yielded"] == 2
    assert {k: v for k, v in later.items() if k in state}.keys() == state.keys()

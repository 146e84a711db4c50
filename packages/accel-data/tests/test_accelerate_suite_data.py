"""Behaviour Accelerate's own test suite checks in accel-data (issue 15): loaders built with
``use_stateful_dataloader=True``, a one-process dispatcher, and a skip that survives prepare."""

from __future__ import annotations

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

"""SeedableRandomSampler and get_sampler."""

from __future__ import annotations

import pickle

import torch
from accel_data import BatchSamplerShard, SeedableRandomSampler, get_sampler
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler


def _order(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_same_seed_and_epoch_same_permutation():
    a = SeedableRandomSampler(range(50), data_seed=3)
    b = SeedableRandomSampler(range(50), data_seed=3)
    torch.manual_seed(0)  # the global RNG plays no part
    first = _order(a, 4)
    torch.manual_seed(1)
    assert first == _order(b, 4)
    assert sorted(first) == list(range(50))
    assert first == _order(a, 4)  # repeatable on the same object too


def test_epochs_and_seeds_differ():
    sampler = SeedableRandomSampler(range(50), data_seed=3)
    orders = [_order(sampler, epoch) for epoch in range(3)]
    assert len({tuple(o) for o in orders}) == 3
    assert _order(SeedableRandomSampler(range(50), data_seed=4), 0) != orders[0]
    # Accelerate's rule: epoch e of seed s is seed s + e (so (3, 1) is (4, 0))
    assert _order(SeedableRandomSampler(range(50), data_seed=4), 0) == orders[1]
    generator = torch.Generator().manual_seed(4)
    assert orders[1] == torch.randperm(50, generator=generator).tolist()


def test_epoch_advances_after_a_full_pass():
    sampler = SeedableRandomSampler(range(20), data_seed=0)
    first, second = list(sampler), list(sampler)
    assert sampler.epoch == 2 and first != second
    assert second == _order(SeedableRandomSampler(range(20), data_seed=0), 1)


def test_seed_sources():
    torch.manual_seed(5)
    gen = torch.Generator().manual_seed(11)
    # Accelerate's: data_seed, else torch.initial_seed() (the generator's seed is not used)
    assert SeedableRandomSampler(range(5), generator=gen).initial_seed == 5
    assert SeedableRandomSampler(range(5), generator=gen, data_seed=2).initial_seed == 2
    assert SeedableRandomSampler(range(5)).initial_seed == 5
    sampler = SeedableRandomSampler(range(5), generator=gen, data_seed=2)
    list(sampler)  # the user's generator is the one re-seeded and drawn from, as in Accelerate
    after = torch.Generator().manual_seed(2)
    torch.randperm(5, generator=after)
    torch.randperm(5, generator=after)  # torch's sampler draws the (empty) remainder too
    assert torch.equal(after.get_state(), gen.get_state()) and sampler.generator is gen


def test_num_samples_and_replacement():
    longer = SeedableRandomSampler(range(4), num_samples=10, data_seed=1)
    drawn = list(longer)
    assert len(drawn) == len(longer) == 10
    assert sorted(drawn[:8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    rep = SeedableRandomSampler(range(4), replacement=True, num_samples=30, data_seed=1)
    assert _order(rep, 0) == _order(rep, 0) and len(_order(rep, 0)) == 30
    assert isinstance(rep, RandomSampler)


def test_pickles_with_its_state():
    sampler = SeedableRandomSampler(range(30), data_seed=9)
    sampler.set_epoch(5)
    clone = pickle.loads(pickle.dumps(sampler))
    assert list(clone) == list(sampler)


def test_get_sampler_looks_through_wrappers():
    random = RandomSampler(range(10))
    loader = DataLoader(range(10), batch_size=2, sampler=random)
    assert get_sampler(loader) is random
    shard = BatchSamplerShard(loader.batch_sampler, 2, 0)
    sharded = DataLoader(range(10), batch_sampler=shard)
    assert get_sampler(sharded) is random
    unbatched = DataLoader(range(10), batch_size=None, sampler=random)
    assert get_sampler(unbatched) is random
    as_sampler = DataLoader(range(10), batch_size=None,
                            sampler=BatchSampler(SequentialSampler(range(10)), 3, False))
    assert isinstance(get_sampler(as_sampler), SequentialSampler)

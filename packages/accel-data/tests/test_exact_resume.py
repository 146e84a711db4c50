"""Exact mid-epoch resume with default options (1 process): the shuffle order, the global
torch RNG, and a pass abandoned on its last batch."""

from __future__ import annotations

import gc
import json

import pytest
import torch
from accel_data import (
    ReplayableRandomSampler,
    get_sampler,
    prepare_data_loader,
    skip_first_batches,
)
from torch.utils.data import DataLoader, IterableDataset, RandomSampler


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


class Noisy(torch.utils.data.Dataset):
    """Each item carries a draw from the (worker's) torch RNG: shows the worker seeds."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return torch.tensor([i, int(torch.randint(1 << 30, ()))])


def _flat(loader):
    return [b.tolist() for b in loader]


def _shuffled(seedable=None, **kwargs):
    options = {} if seedable is None else {"use_seedable_sampler": True, "data_seed": seedable}
    return prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True, **kwargs),
                               **options)


def test_default_shuffle_is_torchs_sampler_and_its_state_resumes_the_epoch():
    torch.manual_seed(0)
    truth = _shuffled()
    assert isinstance(get_sampler(truth), ReplayableRandomSampler)
    epochs = [_flat(truth) for _ in range(3)]
    assert epochs[0] != epochs[1]
    torch.manual_seed(0)  # each pass draws from the global RNG (Accelerate): same seed, same run
    run = _shuffled()
    assert _flat(run) == epochs[0]
    for k, _ in enumerate(run, start=1):
        if k == 3:
            break
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 3 and "sampler_draw" in state
    json.dumps(state)  # plain data, for a checkpoint's JSON
    torch.manual_seed(999)  # a restarted process: the state brings the pass's draw back
    fresh = _shuffled()
    fresh.load_state_dict(state)
    before = torch.get_rng_state()
    assert _flat(fresh) == epochs[1][3:]
    assert torch.equal(torch.get_rng_state(), before)  # the resumed pass drew nothing


def test_a_user_generator_is_drawn_from_as_in_accelerate_and_resumes():
    def make():
        return _shuffled(generator=torch.Generator().manual_seed(4))

    truth = make()
    epochs = [_flat(truth) for _ in range(2)]
    generator = get_sampler(truth).generator
    assert generator is truth.generator  # the user's generator, shared as in torch
    run = make()
    for k, _ in enumerate(run, start=1):
        if k == 2:
            break
    state = run.state_dict()
    fresh = make()
    fresh.load_state_dict(state)
    assert _flat(fresh) == epochs[0][2:]
    assert torch.equal(fresh.generator.get_state(), make_after(1))
    assert _flat(fresh) == epochs[1]


def make_after(epochs):
    """The user generator's state after ``epochs`` passes of ``_shuffled`` (torch's draws:
    one base seed per iterator, then the permutation and its empty remainder)."""
    generator = torch.Generator().manual_seed(4)
    for _ in range(epochs):
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        torch.randperm(20, generator=generator)
        torch.randperm(20, generator=generator)
    return generator.get_state()


def test_replacement_samplers_are_left_as_they_are():
    sampled = prepare_data_loader(DataLoader(list(range(8)), batch_size=2, sampler=RandomSampler(
        range(8), replacement=True)))
    assert type(get_sampler(sampled)) is ReplayableRandomSampler
    assert get_sampler(sampled).replacement


@pytest.mark.parametrize("options", [{}, {"use_seedable_sampler": True},
                                     {"use_seedable_sampler": True, "data_seed": 3},
                                     {"generator": 5}], ids=["torch", "seedable", "data_seed",
                                                             "generator"])
def test_resume_matches_batches_and_global_rng_of_the_uninterrupted_run(options):
    options = dict(options)
    seed = options.pop("generator", None)

    def make():
        torch.manual_seed(0)
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        return prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True,
                                              generator=generator), **options)

    def step(batch, log):  # stands for dropout: one global draw per batch
        log.append((batch.tolist(), torch.rand(()).item()))

    reference: list = []
    loader = make()
    for _ in range(3):
        for batch in loader:
            step(batch, reference)
    expected_rng = torch.get_rng_state()

    interrupted: list = []
    loader = make()
    for batch in loader:
        step(batch, interrupted)
    for k, batch in enumerate(loader, start=1):
        step(batch, interrupted)
        if k == 3:
            state, rng = loader.state_dict(), torch.get_rng_state()
            user = None if seed is None else loader.generator.get_state()
            break

    torch.manual_seed(1234)
    fresh = make()
    fresh.load_state_dict(state)
    torch.set_rng_state(rng)  # what a checkpoint restores
    if user is not None:
        fresh.generator.set_state(user)
    resumed = list(interrupted)
    for _ in range(2):
        for batch in fresh:
            step(batch, resumed)
    assert resumed == reference
    assert torch.equal(torch.get_rng_state(), expected_rng)


def test_worker_seeds_come_from_the_user_generator_as_in_accelerate():
    def make():
        return prepare_data_loader(DataLoader(Noisy(), batch_size=2, num_workers=1,
                                              generator=torch.Generator().manual_seed(1)))

    loader = make()
    epochs = [_flat(loader) for _ in range(2)]
    assert [r[1] for b in epochs[0] for r in b] != [r[1] for b in epochs[1] for r in b]
    torch.manual_seed(5)  # the global RNG plays no part
    assert [_flat(fresh) for fresh in [make()] for _ in range(2)] == epochs


def test_break_on_the_last_batch_finishes_the_epoch():
    loader = _shuffled(seedable=7)
    reference = _shuffled(seedable=7)
    reference.load_state_dict(loader.state_dict())  # same seed
    epochs = [_flat(reference) for _ in range(3)]
    for k, _ in enumerate(loader, start=1):
        if k == len(epochs[0]):
            break
    assert loader.iteration == 1 and loader.state_dict()["epoch"] == 1
    assert loader.state_dict()["batches_yielded"] == 0
    assert _flat(loader) == epochs[1]
    loader.set_epoch(0)
    for _ in loader:
        pass
    assert loader.iteration == 1


def test_a_pass_left_on_its_last_batch_counts_as_done():
    loader = _shuffled(seedable=7)
    reference = _shuffled(seedable=7)
    epochs = [_flat(reference) for _ in range(3)]
    held = iter(loader)
    for _ in epochs[0]:
        next(held)  # the last batch is out; the pass is never resumed
    assert loader.state_dict() == {"epoch": 1, "batches_yielded": 0, "sampler_seed": 7}
    assert _flat(loader) == epochs[1]
    del held
    gc.collect()  # the stale pass closing late must not advance the epoch again
    assert loader.iteration == 2 and _flat(loader) == epochs[2]
    rest = skip_first_batches(loader, 5)  # a skipped copy left on its last batch
    for _ in rest:
        pass
    assert loader.iteration == 4


def test_an_epoch_boundary_state_brings_the_sharded_generator_back():
    def make(seed):
        torch.manual_seed(seed)  # the sampler's generator is seeded by a draw at prepare time
        return prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True),
                                   num_processes=2, process_index=1)

    truth = make(0)
    epochs = [_flat(truth) for _ in range(3)]
    run = make(0)
    _flat(run)
    state = run.state_dict()
    assert state["batches_yielded"] == 0 and "sampler_draw" in state
    fresh = make(99)  # another seed: the state restores the generator
    fresh.load_state_dict(state)
    assert [_flat(fresh) for _ in range(2)] == epochs[1:]

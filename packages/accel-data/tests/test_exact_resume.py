"""Exact mid-epoch resume with default options (1 process): the shuffle order, the global
torch RNG, and a pass abandoned on its last batch."""

from __future__ import annotations

import gc

import pytest
import torch
from accel_data import SeedableRandomSampler, get_sampler, prepare_data_loader, skip_first_batches
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


def _shuffled(**kwargs):
    return prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True, **kwargs))


def test_default_shuffle_is_seedable_and_its_state_resumes_the_epoch():
    torch.manual_seed(0)
    truth = _shuffled()
    assert isinstance(get_sampler(truth), SeedableRandomSampler)
    epochs = [_flat(truth) for _ in range(3)]
    assert epochs[0] != epochs[1]
    torch.manual_seed(0)  # the seed is drawn at prepare time: same seed, same run
    run = _shuffled()
    assert _flat(run) == epochs[0]
    for k, _ in enumerate(run, start=1):
        if k == 3:
            break
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 3 and "sampler_seed" in state
    torch.manual_seed(999)  # a restarted process: the state brings the seed back
    fresh = _shuffled()
    fresh.load_state_dict(state)
    assert _flat(fresh) == epochs[1][3:]
    assert _flat(fresh) == epochs[2]


def test_shuffle_seed_comes_from_the_user_generator_which_is_not_advanced():
    generator = torch.Generator().manual_seed(4)
    before = generator.get_state()
    loader = _shuffled(generator=generator)
    assert get_sampler(loader).initial_seed == 4
    _flat(loader), _flat(loader)
    assert torch.equal(generator.get_state(), before)
    sampled = prepare_data_loader(DataLoader(list(range(8)), batch_size=2, sampler=RandomSampler(
        range(8), replacement=True)))
    assert type(get_sampler(sampled)) is RandomSampler  # only plain ones are replaced


@pytest.mark.parametrize("make", [
    lambda: _shuffled(),
    lambda: prepare_data_loader(DataLoader(list(range(7)), batch_size=2)),
    lambda: prepare_data_loader(DataLoader(Stream(), batch_size=2)),
    lambda: skip_first_batches(_shuffled(), 2),
], ids=["shuffled", "sequential", "iterable", "skipped"])
def test_iterating_never_touches_the_global_rng(make):
    loader = make()
    before = torch.get_rng_state()
    _flat(loader), _flat(loader)
    for _ in loader:
        break
    loader.load_state_dict(loader.state_dict())
    _flat(loader)
    assert torch.equal(torch.get_rng_state(), before)


def test_stateful_loader_never_touches_the_global_rng():
    pytest.importorskip("torchdata.stateful_dataloader")
    loader = prepare_data_loader(DataLoader(list(range(10)), batch_size=2, shuffle=True),
                                 use_stateful_dataloader=True)
    before = torch.get_rng_state()
    _flat(loader), _flat(loader)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("data_seed", [None, 3])
def test_resume_matches_batches_and_global_rng_of_the_uninterrupted_run(data_seed):
    def make():
        torch.manual_seed(0)
        return _shuffled() if data_seed is None else prepare_data_loader(
            DataLoader(list(range(20)), batch_size=3, shuffle=True), data_seed=data_seed)

    def step(batch, log):  # stands for dropout: one global draw per batch
        log.append((batch.tolist(), torch.rand(()).item()))

    reference: list = []
    loader = make()
    for _ in range(2):
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
            break

    torch.manual_seed(1234)
    fresh = make()
    fresh.load_state_dict(state)
    torch.set_rng_state(rng)  # what a checkpoint restores
    resumed = list(interrupted)
    for batch in fresh:
        step(batch, resumed)
    assert resumed == reference
    assert torch.equal(torch.get_rng_state(), expected_rng)


def test_worker_seeds_differ_per_epoch_and_are_a_function_of_seed_and_epoch():
    def make():
        return prepare_data_loader(DataLoader(Noisy(), batch_size=2, num_workers=1),
                                   data_seed=1)

    loader = make()
    epochs = [_flat(loader) for _ in range(2)]
    assert [r[1] for b in epochs[0] for r in b] != [r[1] for b in epochs[1] for r in b]
    torch.manual_seed(5)  # the global RNG plays no part
    fresh = make()
    fresh.load_state_dict({"epoch": 1, "batches_yielded": 0})
    assert _flat(fresh) == epochs[1]  # data_seed fixes the worker seeds too
    unseeded = prepare_data_loader(DataLoader(Noisy(), batch_size=2, num_workers=1))
    state = unseeded.state_dict()
    assert set(state) == {"epoch", "batches_yielded", "loader_seed"}
    first = _flat(unseeded)
    restarted = prepare_data_loader(DataLoader(Noisy(), batch_size=2, num_workers=1))
    restarted.load_state_dict(state)  # the state carries the prepare-time seed
    assert _flat(restarted) == first


def test_break_on_the_last_batch_finishes_the_epoch():
    loader = _shuffled()
    reference = _shuffled()
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
    loader = prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True),
                                 data_seed=7)
    reference = prepare_data_loader(DataLoader(list(range(20)), batch_size=3, shuffle=True),
                                    data_seed=7)
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

"""``load_state_dict(state, position=False)``: what ``Accelerator.load_state`` restores of a
loader by default (Accelerate's): the saved epoch and its shuffle, from its first batch,
so a script that skips the batches it has seen (diffusers' examples, ``Trainer``) skips
them once. ``exact_resume`` is accel's switch for the exact position."""

from __future__ import annotations

import pytest
import torch
from accel_data import DataLoaderConfiguration, prepare_data_loader
from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader


def _loader(shuffle: bool = True, world: int = 1, seed: int = 0):
    torch.manual_seed(seed)
    return prepare_data_loader(DataLoader(list(range(24)), batch_size=2, shuffle=shuffle),
                               num_processes=world, process_index=0)


def _epochs(loader, n: int) -> list[list[list[int]]]:
    return [[b.tolist() for b in loader] for _ in range(n)]


@pytest.mark.parametrize("shuffle", [True, False])
def test_position_false_replays_the_saved_epoch_from_its_first_batch(shuffle):
    straight = _loader(shuffle)
    first, second = _epochs(straight, 2)
    interrupted = _loader(shuffle)
    list(interrupted)  # epoch 0 done
    batches = iter(interrupted)
    for _ in range(5):  # 5 batches into epoch 1
        next(batches)
    state = interrupted.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (1, 5)

    resumed = _loader(shuffle, seed=123)  # another global seed: the order is the saved one
    resumed.load_state_dict(state, position=False)
    assert [b.tolist() for b in resumed] == second  # the whole epoch 1, as first drawn
    exact = _loader(shuffle, seed=123)
    exact.load_state_dict(state)  # the default of the loader itself: the exact position
    assert [b.tolist() for b in exact] == second[5:]
    assert first != second or not shuffle


def test_position_false_at_an_epoch_boundary_starts_the_next_epoch():
    straight = _loader()
    epochs = _epochs(straight, 2)
    done = _loader()
    list(done)
    rng = torch.get_rng_state()  # the next pass draws from the global RNG: a checkpoint's
    resumed = _loader(seed=7)
    resumed.load_state_dict(done.state_dict(), position=False)
    torch.set_rng_state(rng)
    assert [b.tolist() for b in resumed] == epochs[1]


def test_position_false_ignores_another_world_size_and_still_checks_the_state():
    saved = _loader(world=2)
    next(iter(saved))
    state = saved.state_dict()  # mid-epoch, 2 processes
    resumed = _loader(world=1)
    resumed.load_state_dict(state, position=False)  # no re-dealing: the epoch restarts
    assert len([b for b in resumed]) == 12
    with pytest.raises(ConfigurationError, match="Not a dataloader state"):
        _loader().load_state_dict({"epoch": "x"}, position=False)


def test_exact_resume_is_checked_and_not_a_prepare_argument():
    config = DataLoaderConfiguration(exact_resume=True)
    assert "exact_resume" not in config.to_kwargs() and config.to_dict()["exact_resume"]
    with pytest.raises(ConfigurationError, match="exact_resume must be True or False"):
        DataLoaderConfiguration(exact_resume="yes")

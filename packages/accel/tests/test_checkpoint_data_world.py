"""The facade's part of a world-size change for dataloaders: positions saved by
accel-data 0.2.0 or older (no ``source_batches``) warn what they repeat or skip."""

from __future__ import annotations

import warnings

import pytest
from accel._checkpoint_objects import LegacyPosition, saved_dataloaders
from accel_data import prepare_data_loader
from torch.utils.data import DataLoader

SAVED = {"dataloader": {"kind": "state"}}  # the manifest's entry: only its name matters


def _loader(world: int = 1):
    return prepare_data_loader(DataLoader(list(range(40)), batch_size=2),
                               num_processes=world, process_index=0)


@pytest.mark.parametrize("saved_world,world,fate,gap", [(2, 1, "seen twice", 3),
                                                        (1, 4, "skipped", 9)])
def test_a_legacy_position_on_another_world_warns_what_it_repeats_or_skips(
        saved_world, world, fate, gap):
    loader = _loader(world)
    found = saved_dataloaders("ckpt", [loader], SAVED, saved_world, world)
    assert isinstance(found["dataloader"], LegacyPosition)
    assert found["dataloader"].state_dict() == loader.state_dict()
    with pytest.warns(UserWarning, match=f"saved by accel-data 0.2.0 or older with "
                      f"{saved_world} process.*about {gap} batches of that epoch are {fate}"):
        found["dataloader"].load_state_dict({"epoch": 0, "batches_yielded": 3})
    assert loader.state_dict()["batches_yielded"] == 3  # loaded all the same


def test_a_new_position_or_the_same_world_loads_without_a_word():
    before = _loader(2)
    next(iter(before))
    state = before.state_dict()
    loader = _loader(1)
    found = saved_dataloaders("ckpt", [loader], SAVED, 2, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found["dataloader"].load_state_dict(state)  # re-dealt exactly by the loader
        assert [b.tolist() for b in loader][0] == [4, 5]
        same = saved_dataloaders("ckpt", [loader], SAVED, 2, 2)["dataloader"]
        assert same is loader  # nothing to say on the same world

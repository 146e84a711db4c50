"""Loader behaviours reached from Accelerate's API, as Accelerate 1.15 has them: pickling,
the class of a prepared loader, dispatching a stateful loader, the split_batches error and
the warning for a loader that drop_last leaves empty."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from accel_data import DataLoaderShard, prepare_data_loader, skip_first_batches
from accel_data.dispatcher import DataLoaderDispatcher
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(6))


def _flat(loader):
    return [b.tolist() for b in loader]


def _stateful():
    pytest.importorskip("torchdata.stateful_dataloader")
    return prepare_data_loader(DataLoader(list(range(10)), batch_size=2),
                               use_stateful_dataloader=True)


LOADERS = {
    "shuffled": lambda: prepare_data_loader(DataLoader(list(range(10)), batch_size=2,
                                                       shuffle=True)),
    "sharded": lambda: prepare_data_loader(DataLoader(list(range(10)), batch_size=2,
                                                      shuffle=True),
                                           num_processes=2, process_index=1),
    "seedable": lambda: prepare_data_loader(DataLoader(list(range(10)), batch_size=2,
                                                       shuffle=True), use_seedable_sampler=True),
    "iterable": lambda: prepare_data_loader(DataLoader(Stream(), batch_size=2),
                                            num_processes=2, process_index=0),
    "skipped": lambda: skip_first_batches(
        prepare_data_loader(DataLoader(list(range(10)), batch_size=2)), 2),
    "stateful": _stateful,
}


@pytest.mark.parametrize("name", list(LOADERS))
def test_prepared_loaders_pickle_mid_epoch(name):
    loader = LOADERS[name]()
    iterator = iter(loader)
    next(iterator)
    copy = pickle.loads(pickle.dumps(loader))
    assert type(copy) is type(loader)
    assert len(_flat(copy)) == len(_flat(LOADERS[name]()))


def test_a_stateful_loader_unpickles_where_its_class_was_never_made(monkeypatch):
    from accel_data import stateful

    data = pickle.dumps(_stateful())
    # as in a fresh process: the variant class does not exist yet, pickle asks the module
    monkeypatch.setattr(stateful, "_CLASSES", {})
    monkeypatch.delattr(stateful, "StatefulDataLoaderShard")
    loader = pickle.loads(data)
    assert type(loader).__name__ == "StatefulDataLoaderShard" and len(_flat(loader)) == 5
    assert type(loader) is stateful.StatefulDataLoaderShard


def test_a_prepared_loader_is_a_dataloader_not_the_users_subclass_as_in_accelerate():
    class Mine(DataLoader):
        marker = "mine"

    prepared = prepare_data_loader(Mine(list(range(4)), batch_size=2), num_processes=2,
                                   process_index=0)
    # Accelerate 1.15 rebuilds the loader as its DataLoaderShard too (measured):
    # isinstance(prepared, Mine) is False there, and the subclass's attributes are not kept
    assert isinstance(prepared, DataLoaderShard) and isinstance(prepared, DataLoader)
    assert not isinstance(prepared, Mine) and not hasattr(prepared, "marker")


def test_dispatch_batches_with_a_stateful_loader_is_accepted():
    pytest.importorskip("torchdata.stateful_dataloader")
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = DataLoaderDispatcher(list(range(10)), batch_size=2, use_stateful_dataloader=True)
    assert isinstance(loader, StatefulDataLoader) and isinstance(loader, DataLoaderDispatcher)
    assert _flat(loader) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    one = prepare_data_loader(DataLoader(list(range(4)), batch_size=2), device="cpu",
                              put_on_device=True, dispatch_batches=True,
                              use_stateful_dataloader=True)
    assert isinstance(one, StatefulDataLoader) and _flat(one) == [[0, 1], [2, 3]]


@pytest.mark.parametrize(("size", "num"), [(3, 2), (6, 4)])
def test_split_batches_error_is_accelerates(size, num):
    loader = DataLoader(list(range(12)), batch_size=size)
    with pytest.raises(ValueError) as info:
        prepare_data_loader(loader, num_processes=num, process_index=0, split_batches=True)
    assert (f"To use a `DataLoader` in `split_batches` mode, the batch size ({size}) needs "
            f"to be a round multiple of the number of processes ({num}).") in str(info.value)
    assert f"multiple of {num}, or split_batches=False" in str(info.value)


def test_drop_last_leaving_nothing_warns_once_on_the_main_process():
    loader = DataLoader(list(range(5)), batch_size=4, drop_last=True)
    with pytest.warns(UserWarning, match=r"dataset has 5 samples and one step takes 8 = 2 "
                      r"processes x batch_size 4\. Use a smaller batch_size"):
        prepared = prepare_data_loader(loader, num_processes=2, process_index=0)
    assert _flat(prepared) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_data_loader(loader, num_processes=2, process_index=0)  # once
        prepare_data_loader(loader, num_processes=2, process_index=1)  # not the main one
        fresh = DataLoader(list(range(5)), batch_size=4, drop_last=True)
        prepare_data_loader(fresh, num_processes=1, process_index=0)  # 5 >= 4: one batch
        prepare_data_loader(fresh, num_processes=2, process_index=0, split_batches=True)
    with pytest.warns(UserWarning, match="one step takes 8. Use"):
        prepare_data_loader(DataLoader(list(range(5)), batch_size=8, drop_last=True),
                            num_processes=2, process_index=0, split_batches=True)


def test_an_iterable_datasets_generator_is_seeded_with_the_epoch_as_in_accelerate():
    class Shuffling(IterableDataset):
        def __init__(self):
            self.generator = torch.Generator()

        def __iter__(self):
            return iter(torch.randperm(8, generator=self.generator).tolist())

    def order(epoch):
        generator = torch.Generator().manual_seed(epoch)
        return torch.randperm(8, generator=generator).tolist()

    shards = [prepare_data_loader(DataLoader(Shuffling(), batch_size=2), num_processes=2,
                                  process_index=r) for r in (0, 1)]
    for epoch in range(2):
        seen = [_flat(s) for s in shards]
        assert [i for k in range(2) for r in (0, 1) for i in seen[r][k]] == order(epoch)

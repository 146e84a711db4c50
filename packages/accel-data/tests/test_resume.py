"""Config, skipping, resumable position, dispatcher helpers, gather_for_metrics (1 process)."""

from __future__ import annotations

import pytest
import torch
from accel_data import (
    BatchSamplerShard,
    DataLoaderConfiguration,
    DataLoaderShard,
    SkipBatchSampler,
    SkipDataLoader,
    UnsizedLoaderError,
    gather_for_metrics,
    prepare_data_loader,
    skip_first_batches,
    slice_batch,
)
from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler


class Counting(torch.utils.data.Dataset):
    """Records which samples were read (skipping must not read them)."""

    def __init__(self, n):
        self.n, self.reads = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads.append(i)
        return i


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def _flat(loader):
    return [b.tolist() for b in loader]


def test_config_validates_and_converts():
    config = DataLoaderConfiguration(split_batches=True, data_seed=3)
    assert config.to_kwargs()["split_batches"] is True and config.dispatch_batches is None
    with pytest.raises(ConfigurationError, match="split_batches must be True or False"):
        DataLoaderConfiguration(split_batches=1)
    with pytest.raises(ConfigurationError, match="data_seed"):
        DataLoaderConfiguration(data_seed="7")
    with pytest.raises(ConfigurationError, match="dispatch_batches"):
        DataLoaderConfiguration(dispatch_batches="yes")
    # Accelerate accepts both together (test_loader_behaviours.py runs it)
    assert DataLoaderConfiguration(dispatch_batches=True, use_stateful_dataloader=True)
    with pytest.raises(TypeError):
        DataLoaderConfiguration(True)  # keyword-only


def test_skip_batch_sampler():
    base = BatchSampler(SequentialSampler(range(10)), 3, False)
    skip = SkipBatchSampler(base, 2)
    assert list(skip) == [[6, 7, 8], [9]] and len(skip) == 2 and skip.total_length == 4
    kept = SkipBatchSampler(base, 2, keep_first=1)
    assert list(kept) == [[0, 1, 2], [9]] and len(kept) == 2
    assert len(SkipBatchSampler(base, 9)) == 0


@pytest.mark.parametrize("workers", [0, 1])
def test_prepared_skip_reads_nothing_skipped_and_only_this_epoch(workers):
    dataset = Counting(10)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=3, num_workers=workers,
                                            persistent_workers=workers > 0))
    rest = skip_first_batches(loader, 2)
    assert len(rest) == 2
    assert _flat(rest) == [[6, 7, 8], [9]]
    if workers == 0:
        assert dataset.reads == [6, 7, 8, 9]  # skipped samples were never read
    assert loader.iteration == 1  # the original moves on to the next epoch
    assert _flat(rest) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # next epoch: whole
    assert _flat(loader) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_plain_loader_becomes_skip_dataloader():
    rest = skip_first_batches(DataLoader(list(range(7)), batch_size=2), 1)
    assert isinstance(rest, SkipDataLoader) and not rest._is_accelerate_prepared
    assert _flat(rest) == [[2, 3], [4, 5], [6]]
    assert len(_flat(rest)) == 4
    stream = skip_first_batches(DataLoader(Stream(7), batch_size=2), 2)
    assert _flat(stream) == [[4, 5], [6]]
    with pytest.raises(ConfigurationError, match="non-negative"):
        skip_first_batches(rest, -1)


def test_state_dict_round_trip_with_shuffle():
    def make(seed=0):
        torch.manual_seed(seed)  # the shuffle seed is drawn at prepare time
        return prepare_data_loader(DataLoader(Counting(20), batch_size=3, shuffle=True),
                                   use_seedable_sampler=True)

    truth = make()
    epochs = [_flat(truth) for _ in range(3)]
    run = make()
    _flat(run)
    for k, batch in enumerate(run, start=1):
        if k == 3:
            break
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 3
    fresh = make(999)  # the fresh loader draws another seed: the state restores it
    assert fresh.get_sampler().initial_seed != state["sampler_seed"]
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and len(fresh) == len(epochs[1]) - 3
    assert _flat(fresh) == epochs[1][3:]
    assert _flat(fresh) == epochs[2]


def test_state_on_the_last_batch_is_the_next_epoch():
    loader = prepare_data_loader(DataLoader(list(range(4)), batch_size=2), data_seed=3)
    states = [loader.state_dict() for _ in loader]
    assert states == [{"epoch": 0, "batches_yielded": 1, "num_processes": 1, "source_batches": 1,
                       "batch_size": 2, "split_batches": False},
                      {"epoch": 1, "batches_yielded": 0}]
    assert loader.state_dict() == {"epoch": 1, "batches_yielded": 0}
    with pytest.raises(ConfigurationError, match="state_dict"):
        loader.load_state_dict({"epoch": 1})


def test_iterable_resume_reads_past_the_skipped_batches():
    loader = prepare_data_loader(DataLoader(Stream(9), batch_size=2))
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3})
    assert _flat(loader) == [[6, 7], [8]]


def test_remainder_is_exact_for_custom_lengths():
    sampler = BatchSampler(SequentialSampler(range(11)), 3, False)
    loader = DataLoaderShard(list(range(11)), batch_sampler=BatchSamplerShard(sampler, 2, 1))
    list(loader)
    assert loader.remainder == 5  # 11 = 6 + 5: five real samples in the last global batch
    unpadded = prepare_data_loader(DataLoader(list(range(11)), batch_size=3))
    list(unpadded)
    # one process: nothing padded; the short last batch's real rows, as Accelerate counts
    # them (gather_for_metrics keeps them all; a value repeated per batch is cut to them)
    assert unpadded.remainder == 2


def test_unsized_iterable_len_error_names_the_fix():
    loader = prepare_data_loader(DataLoader(Stream(5), batch_size=2), num_processes=2,
                                 process_index=0, dispatch_batches=False)
    with pytest.raises(UnsizedLoaderError, match="has no __len__") as info:
        len(loader)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert _flat(loader) == [[0, 1], [4, 0]]  # it still iterates


def test_batch_sampler_without_batch_size_errors():
    class Buckets:
        def __iter__(self):
            return iter([[0, 1], [2]])

        def __len__(self):
            return 2

    loader = DataLoader(list(range(3)), batch_sampler=Buckets())
    with pytest.raises(ConfigurationError, match="does not have the `batch_size` attribute"):
        prepare_data_loader(loader, num_processes=2, process_index=0, split_batches=True)
    rank1 = prepare_data_loader(loader, num_processes=2, process_index=1)  # even without padding
    assert [b.tolist() for b in rank1] == [[2]]


def test_slice_batch_keeps_structure():
    batch = {"x": torch.arange(6).view(3, 2), "names": ["a", "b", "c"],
             "pair": (torch.arange(3), [torch.ones(3)])}
    part = slice_batch(batch, 1, 3)
    assert part["x"].tolist() == [[2, 3], [4, 5]] and part["names"] == ["b", "c"]
    assert part["pair"][0].tolist() == [1, 2] and part["pair"][1][0].shape == (2,)


def test_slice_batch_keeps_a_namedtuple_of_plain_fields_whole():
    """A namedtuple is a record: its plain fields are not rows to slice (it used to come
    back as a plain tuple of some of its fields)."""
    from collections import namedtuple

    Meta = namedtuple("Meta", ["lr", "tag", "epoch"])
    Batch = namedtuple("Batch", ["x", "meta"])
    part = slice_batch(Batch(torch.arange(4), Meta(0.1, "a", 3)), 1, 3)
    assert type(part) is Batch and part.x.tolist() == [1, 2]
    assert part.meta == Meta(0.1, "a", 3) and type(part.meta) is Meta


def test_gather_for_metrics_single_process():
    data = {"a": torch.arange(3), "b": [torch.ones(3, 2)]}
    out = gather_for_metrics(data)
    assert torch.equal(out["a"], data["a"])
    assert gather_for_metrics(["x", "y"]) == ["x", "y"]
    assert gather_for_metrics({"k": 1}, use_gather_object=True) == [{"k": 1}]


def test_stateful_dataloader_resumes():
    pytest.importorskip("torchdata.stateful_dataloader")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return prepare_data_loader(DataLoader(list(range(10)), batch_size=2, shuffle=True),
                                   use_seedable_sampler=True, data_seed=5,
                                   use_stateful_dataloader=True)

    truth = _flat(make())
    run = make()
    assert isinstance(run, StatefulDataLoader) and isinstance(run, DataLoaderShard)
    for k, _ in enumerate(run, start=1):
        if k == 2:
            break
    state = run.state_dict()
    assert state["_num_yielded"] == 2 and state["batches_yielded"] == 2
    fresh = make()
    fresh.load_state_dict(state)
    assert _flat(fresh) == truth[2:]


def _td_flat(loader):
    return [b.tolist() for b in loader]


@pytest.mark.parametrize("workers", [0, 1])
def test_stateful_states_load_into_torchdata_and_back(workers):
    pytest.importorskip("torchdata.stateful_dataloader")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def ours():
        return prepare_data_loader(DataLoader(list(range(10)), batch_size=2,
                                              num_workers=workers),
                                   use_stateful_dataloader=True)

    def theirs():
        return StatefulDataLoader(list(range(10)), batch_size=2, num_workers=workers)

    run = ours()
    for k, _ in enumerate(run, start=1):
        if k == 2:
            break
    plain = theirs()
    plain.load_state_dict(run.state_dict())  # accel's state -> torchdata
    assert _td_flat(plain) == [[4, 5], [6, 7], [8, 9]]
    source = theirs()
    held = iter(source)
    next(held), next(held), next(held)
    fresh = ours()
    fresh.load_state_dict(source.state_dict())  # torchdata's state -> accel
    assert _td_flat(fresh) == [[6, 7], [8, 9]]
    assert _td_flat(fresh) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    if workers == 0:  # an epoch boundary: a fresh iterator's state (no worker was started)
        start = theirs()
        start.load_state_dict(ours().state_dict())
        assert len(_td_flat(start)) == 5

"""Collectives and loaders over data-parallel process groups, in 2 real processes.

    accel launch --cpu --num_processes 2 data_groups.py

Tensor parallelism of degree 2 on 2 processes leaves one data-parallel rank: each
process is alone in its data-parallel group (``new_group([0])``, ``new_group([1])``),
must see the whole dataset, and must see the same batches as the other process. A
group of both processes (``new_group([0, 1])``) checks real exchanges through a group
that is not the default one, and ``group=None`` the unchanged default behaviour.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from accel_data import (
    DataLoaderDispatcher,
    gather_for_metrics,
    prepare_data_loader,
)
from accel_state import PartialState
from accel_state.errors import ConfigurationError, DistributedOperationException
from accel_state.operations import (
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)
from ops_checks import debug_mode
from torch.utils.data import DataLoader, Dataset, IterableDataset


class Items(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def rows(loader):
    return [i for batch in loader for i in batch.tolist()]


def same_everywhere(value):
    """The value of every process (all must agree)."""
    every = gather_object([value])
    assert all(v == every[0] for v in every), every
    return every[0]


def check_ops(rank, mine, pair, other):
    one = gather(torch.full((1, 2), float(rank)), group=mine)
    assert one.tolist() == [[float(rank)] * 2], one  # a 1-row gather stays 1 row
    assert gather_object([rank], group=mine) == [rank]
    assert reduce(torch.tensor([rank + 1.0]), "sum", group=mine).tolist() == [rank + 1.0]
    assert broadcast(torch.tensor([float(rank)]), 0, group=mine).tolist() == [float(rank)]
    assert broadcast_object_list([rank], group=mine) == [rank]
    assert pad_across_processes(torch.ones(rank + 1), group=mine).shape == (rank + 1,)
    # a non-default group of both processes: real exchanges, group ranks == global ranks
    assert gather(torch.full((1, 2), float(rank)), group=pair)[:, 0].tolist() == [0.0, 1.0]
    assert gather_object([rank], group=pair) == [0, 1]
    assert reduce(torch.tensor([rank + 1.0]), "mean", group=pair).tolist() == [1.5]
    assert broadcast(torch.tensor([float(rank)]), 1, group=pair).tolist() == [1.0]
    assert broadcast_object_list([rank], from_process=1, group=pair) == [1]
    assert pad_across_processes(torch.ones(rank + 1), group=pair).shape == (2,)
    with debug_mode(True):  # verify_operation checks within the same group
        assert gather(torch.ones(rank + 1), group=mine).shape == (rank + 1,)
        try:
            gather(torch.ones(rank + 1), group=pair)
        except DistributedOperationException as error:
            assert "Process 1: [2]" in str(error), error
        else:
            raise AssertionError("mismatched shapes in debug mode must raise on every rank")
    try:
        gather(torch.ones(1), group=other)
    except ConfigurationError as error:
        assert "not a member" in str(error), error
    else:
        raise AssertionError("a group this process is not in must be refused")
    assert gather(torch.full((1, 2), float(rank))).shape == (2, 2)  # group=None: the world


def check_singleton_loaders(rank, mine, other):
    """One data-parallel rank: every process reads everything, in the same order."""
    def shuffled(**kwargs):
        return prepare_data_loader(DataLoader(Items(23), batch_size=4, shuffle=True, **kwargs),
                                   num_processes=1, process_index=0, group=mine)

    shared = shuffled(generator=torch.Generator().manual_seed(5))
    first, second = rows(shared), rows(shared)
    assert sorted(first) == list(range(23)) and first != list(range(23)), first
    assert same_everywhere(first) == first and same_everywhere(second) == second
    assert second != first  # a new permutation per epoch, still the same on both ranks
    torch.manual_seed(1000 + rank)  # per-rank seeds: the seed still comes from global rank 0
    drawn = rows(shuffled())
    assert sorted(drawn) == list(range(23)) and same_everywhere(drawn) == drawn
    loader = prepare_data_loader(DataLoader(Items(23), batch_size=4), group=mine)
    seen = [gather_for_metrics(batch, group=mine) for batch in loader]
    assert torch.cat(seen).tolist() == list(range(23))  # exactly len(dataset) rows
    names = []
    for batch in loader:
        names += gather_for_metrics([f"x{i}" for i in batch.tolist()], group=mine)
    assert names == [f"x{i}" for i in range(23)], names
    stream = prepare_data_loader(DataLoader(Stream(11), batch_size=3), dispatch_batches=True,
                                 group=mine)
    # a group of one: still a dispatcher, as Accelerate gives one on one process
    assert type(stream) is DataLoaderDispatcher and rows(stream) == list(range(11))
    direct = DataLoaderDispatcher(Stream(11), batch_size=3, group=mine)
    assert direct._source == rank  # the group's rank 0 is this process's global rank
    assert rows(direct) == list(range(11))
    try:
        prepare_data_loader(DataLoader(Items(4)), group=other)
    except ConfigurationError as error:
        assert "not a member" in str(error), error
    else:
        raise AssertionError("prepare_data_loader must refuse a group it is not in")


def check_pair_loaders(rank, pair):
    """A 2-process data-parallel group: sharded, dispatched, gathered within the group."""
    def loader(**kwargs):
        return DataLoader(Items(23), batch_size=4, shuffle=True, **kwargs)

    grouped = prepare_data_loader(loader(), group=pair, use_seedable_sampler=True, data_seed=9)
    default = prepare_data_loader(loader(), use_seedable_sampler=True,
                                  data_seed=9)  # group=None: the same world
    assert grouped.batch_sampler.process_index == rank
    mine = rows(grouped)
    assert mine == rows(default)
    every = gather_object(mine)
    assert sorted(set(every)) == list(range(23)) and len(every) == 24  # one wrap-around pad
    exact = [gather_for_metrics(b, group=pair) for b in prepare_data_loader(
        DataLoader(Items(23), batch_size=4), group=pair)]
    assert torch.cat(exact).tolist() == list(range(23))
    # Accelerate's default: an IterableDataset is dispatched when batches go to the device
    dispatched = prepare_data_loader(DataLoader(Stream(11), batch_size=3), group=pair,
                                     device="cpu", put_on_device=True)
    assert isinstance(dispatched, DataLoaderDispatcher) and dispatched.num_processes == 2
    got = [gather_for_metrics(b, group=pair) for b in dispatched]
    assert torch.cat(got).tolist() == list(range(11)), got


def main():
    state = PartialState(cpu=True)
    rank = state.process_index
    assert state.num_processes == 2
    groups = [dist.new_group([0]), dist.new_group([1])]  # every rank creates every group
    pair = dist.new_group([0, 1])
    mine, other = groups[rank], groups[1 - rank]
    check_ops(rank, mine, pair, other)
    check_singleton_loaders(rank, mine, other)
    check_pair_loaders(rank, pair)
    state.wait_for_everyone()
    print(f"DATA-GROUPS-OK rank={rank}")


if __name__ == "__main__":
    main()

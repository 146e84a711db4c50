"""``group=``: loaders and gather_for_metrics over a data-parallel process group.

With one process the groups are real (gloo) but hold one process; several groups at
once, and groups whose rank 0 is not global rank 0, are checked in
``tests/integration/scripts/data_groups.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from accel_data import (
    DataLoaderDispatcher,
    DataLoaderShard,
    SeedableRandomSampler,
    gather_for_metrics,
    get_sampler,
    prepare_data_loader,
)
from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader, TensorDataset


def _loader(n=10, **kwargs):
    return DataLoader(TensorDataset(torch.arange(n)), batch_size=3, **kwargs)


def _indices(loader):
    return [i for (batch,) in loader for i in batch.tolist()]


def test_the_world_is_read_from_the_group(gloo_group):
    group = dist.new_group([0])
    torch.manual_seed(3)
    drawn = int(torch.empty((), dtype=torch.int64).random_().item())
    torch.manual_seed(3)
    loader = prepare_data_loader(_loader(shuffle=True), group=group)
    assert isinstance(loader, DataLoaderShard) and not isinstance(loader, DataLoaderDispatcher)
    # a group: the order must not depend on each process's global RNG (tensor-parallel
    # peers in other groups read the same batches): a generator seeded by one global draw
    assert get_sampler(loader).generator.initial_seed() == drawn
    torch.manual_seed(3)
    loader = prepare_data_loader(_loader(shuffle=True), group=group, use_seedable_sampler=True)
    sampler = get_sampler(loader)
    assert isinstance(sampler, SeedableRandomSampler) and sampler.initial_seed == 3 != drawn
    assert sorted(_indices(loader)) == list(range(10))
    same = prepare_data_loader(_loader(), num_processes=1, process_index=0, group=group)
    assert _indices(same) == list(range(10))


def test_values_that_contradict_the_group_are_refused(gloo_group):
    group = dist.new_group([0])
    with pytest.raises(ConfigurationError, match="num_processes=2.*has 1 processes"):
        prepare_data_loader(_loader(), num_processes=2, process_index=1, group=group)
    with pytest.raises(ConfigurationError, match="process_index must be an int in"):
        prepare_data_loader(_loader(), process_index=1, group=group)


def test_the_dispatcher_sends_within_its_group(gloo_group):
    group = dist.new_group([0])
    loader = DataLoaderDispatcher(TensorDataset(torch.arange(7)), batch_size=2, group=group)
    assert (loader.num_processes, loader.process_index, loader._source) == (1, 0, 0)
    assert _indices(loader) == list(range(7))  # real broadcasts on the one-process group


def test_gather_for_metrics_within_a_group_keeps_every_row_once(gloo_group):
    group = dist.new_group([0])
    loader = prepare_data_loader(_loader(), group=group)
    rows = [gather_for_metrics(batch, group=group) for (batch,) in loader]
    assert torch.cat(rows).tolist() == list(range(10))
    assert gather_for_metrics(["a"], group=group) == ["a"]


def test_a_group_without_torch_distributed_names_the_argument_and_the_fix(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    stale = dist.new_group([0])
    dist.destroy_process_group()  # `stale` outlives its process group
    match = "got group=.*not initialised.*init_process_group.*group=None"
    with pytest.raises(ConfigurationError, match="prepare_data_loader " + match):
        prepare_data_loader(_loader(), group=stale)
    with pytest.raises(ConfigurationError, match="DataLoaderDispatcher " + match):
        DataLoaderDispatcher(TensorDataset(torch.arange(4)), batch_size=2, group=stale)
    with pytest.raises(ConfigurationError, match="group=.*not initialised"):
        gather_for_metrics(torch.ones(2), group=stale)
    assert prepare_data_loader(_loader()).batch_sampler.batch_size == 3  # group=None: as before

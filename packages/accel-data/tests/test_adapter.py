"""DataLoaderAdapter: a plain or stateful DataLoader behind one wrapper."""

from __future__ import annotations

import pytest
import torch
from accel_data import DataLoaderAdapter
from accel_state import ConfigurationError
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler


def test_plain_adapter_behaves_as_its_dataloader():
    data = list(range(10))
    adapter = DataLoaderAdapter(data, batch_size=4)
    assert isinstance(adapter, DataLoader)
    assert len(adapter) == 3 and adapter.batch_size == 4 and adapter.dataset is data
    assert [b.tolist() for b in adapter] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ConfigurationError, match="use_stateful_dataloader=True"):
        adapter.state_dict()


def test_batch_sampler_is_passed_through():
    sampler = BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=True)
    adapter = DataLoaderAdapter(list(range(5)), batch_sampler=sampler)
    assert adapter.batch_sampler is sampler
    assert [b.tolist() for b in adapter] == [[0, 1], [2, 3]]


def test_stateful_adapter_resumes_mid_epoch():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    data = torch.arange(12)
    adapter = DataLoaderAdapter(data, use_stateful_dataloader=True, batch_size=3)
    assert isinstance(adapter, stateful.StatefulDataLoader)
    iterator = iter(adapter)
    first = [next(iterator).tolist(), next(iterator).tolist()]
    state = adapter.state_dict()
    resumed = DataLoaderAdapter(data, use_stateful_dataloader=True, batch_size=3)
    resumed.load_state_dict(state)
    assert first == [[0, 1, 2], [3, 4, 5]]
    assert [b.tolist() for b in resumed] == [[6, 7, 8], [9, 10, 11]]

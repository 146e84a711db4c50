"""What Accelerate's bundled test scripts found (issue 24), one process each: the join's
override warns for iterable loaders, ``dataloader_config`` is replaceable, a pickled state
equals the live one, ``prepare`` after a reset fails early, and ``PartialState().debug``
switches the shape checks at run time. The scripts themselves run in
tests/integration/test_bundled_scripts.py."""

from __future__ import annotations

import contextlib
import pickle
import types
import warnings
from unittest.mock import Mock

import pytest
import torch
from accel import Accelerator, DataLoaderConfiguration
from accel.state import AcceleratorState
from accel_state import ConfigurationError, DistributedType, PartialState
from accel_state.operation_checks import _debug_mode
from torch.utils.data import DataLoader, IterableDataset


class _Stream(IterableDataset):
    def __iter__(self):
        yield from range(4)


class _TwoRanks(types.SimpleNamespace):
    """A strategy with two data-parallel ranks whose join is a no-op context."""

    def join(self, joinables, *, enable):
        return contextlib.nullcontext()


def test_overriding_even_batches_warns_for_iterable_loaders_and_skips_them(monkeypatch):
    accelerator = Accelerator(cpu=True)
    # what two ranks' prepared loaders look like to the join (one process never pads)
    stream = types.SimpleNamespace(even_batches=True, dataset=_Stream())
    mapped = types.SimpleNamespace(even_batches=True, dataset=list(range(4)))
    monkeypatch.setattr(accelerator, "_dataloaders", [stream, mapped])
    monkeypatch.setattr(accelerator, "_strategy", _TwoRanks(
        dp_size=2, name="ddp", distributed_type=DistributedType.MULTI_CPU))
    ddp = Mock(spec=torch.nn.parallel.DistributedDataParallel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([ddp], even_batches=False):
            inside = stream.even_batches, mapped.even_batches
    said = [str(w.message) for w in caught if w.category is UserWarning]
    assert inside == (True, False)
    assert len(said) == 1 and "only supported for map-style datasets" in said[0], said
    assert mapped.even_batches is True
    with warnings.catch_warnings(record=True) as caught:  # no override asked: no warning
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([ddp]):
            pass
    assert not [w for w in caught if "map-style" in str(w.message)]


def test_dataloader_config_is_replaceable_and_validated():
    accelerator = Accelerator(cpu=True)
    accelerator.dataloader_config = DataLoaderConfiguration(split_batches=True,
                                                            even_batches=False)
    assert accelerator.split_batches is True and accelerator.even_batches is False
    loader = accelerator.prepare(DataLoader(list(range(4)), batch_size=2))
    assert loader.even_batches is False
    with pytest.raises(ConfigurationError, match="DataLoaderConfiguration"):
        accelerator.dataloader_config = {"split_batches": True}
    assert accelerator.split_batches is True  # the refused value changed nothing


def test_a_pickled_state_equals_the_live_one():
    accelerator = Accelerator(cpu=True)
    restored = pickle.loads(pickle.dumps(accelerator))
    assert restored.state.__dict__ == accelerator.state.__dict__
    assert restored.state.device == accelerator.device


def test_prepare_after_the_state_was_reset_fails_early_saying_why():
    accelerator = Accelerator(cpu=True)
    AcceleratorState._reset_state()
    try:
        with pytest.raises(AttributeError, match=r"This happens if `AcceleratorState\._reset"):
            accelerator.prepare(torch.nn.Linear(1, 1))
    finally:
        Accelerator(cpu=True)


def test_the_debug_switch_is_the_states_once_it_exists(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "1")
    PartialState._reset_state()
    assert _debug_mode() is True  # no state yet: the environment
    state = PartialState(cpu=True)
    assert state.debug is True
    state.debug = False
    assert _debug_mode() is False  # flipped at run time, as Accelerate's scripts do
    state.debug = True
    assert _debug_mode() is True
    state.debug = False


class _Rows:
    """What split_between_processes sees of a ``datasets.Dataset``: slicing gives a dict of
    columns, ``select`` gives rows."""

    column_names = ["k"]

    def __init__(self, rows):
        self.rows = list(rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return {"k": self.rows[index]}

    def select(self, indices):
        return _Rows(self.rows[i] for i in indices)


def test_a_hugging_face_dataset_is_split_by_rows():
    from accel_state.state import _split

    data = _Rows(range(3))
    assert [_split(data, 2, r, False).rows for r in (0, 1)] == [[0, 1], [2]]
    assert [_split(data, 2, r, True).rows for r in (0, 1)] == [[0, 1], [2, 2]]

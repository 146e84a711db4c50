"""DataLoaderShard: device placement, end_of_dataloader look-ahead, epochs, state."""

from __future__ import annotations

import pickle

import pytest
import torch
from accel_data import BatchSamplerShard, DataLoaderShard, SeedableRandomSampler
from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset


def _dataset(n=10):
    return TensorDataset(torch.arange(n, dtype=torch.float32), torch.arange(n))


def _shard_loader(n=10, batch_size=3, num=2, rank=0, sampler=None, **kwargs):
    sampler = sampler if sampler is not None else SequentialSampler(range(n))
    shard = BatchSamplerShard(BatchSampler(sampler, batch_size, False), num, rank)
    return DataLoaderShard(_dataset(n), batch_sampler=shard, **kwargs)


def test_is_a_dataloader_and_prepared():
    loader = _shard_loader()
    assert isinstance(loader, DataLoader)
    assert loader._is_accelerate_prepared is True
    assert len(loader) == 2


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_batches_land_on_the_device(device):
    loader = _shard_loader(device=device, non_blocking=True)
    assert loader.device == torch.device(device) and loader.non_blocking
    batches = list(loader)
    assert batches and all(t.device.type == device for b in batches for t in b)


def test_cpu_placement_keeps_cpu_batches_and_moves_everything_else():
    from accel_data.placement import onto_cpu as _onto_cpu

    pair, mapping = [torch.ones(2), torch.arange(3)], {"x": torch.ones(2)}
    assert _onto_cpu(pair) is pair and _onto_cpu(mapping) is mapping  # nothing to move
    assert _onto_cpu(pair[0]) is pair[0]
    meta = [torch.empty(2, device="meta")]
    with pytest.raises(NotImplementedError):  # not on the CPU: really moved (and meta can't)
        _onto_cpu(meta)
    nested = {"x": [torch.ones(1)], "label": "a"}
    moved = _onto_cpu(nested)  # other structures go through send_to_device
    assert moved == {"x": moved["x"], "label": "a"} and moved["x"][0].device.type == "cpu"
    loader = _shard_loader(device="cpu")
    assert [b[1].tolist() for b in loader] == [[0, 1, 2], [6, 7, 8]]


def test_device_none_leaves_batches_alone():
    loader = _shard_loader()
    assert loader.device is None
    first = next(iter(loader))
    assert first[1].tolist() == [0, 1, 2]


@pytest.mark.parametrize(("n", "batches"), [(10, 2), (3, 1), (13, 3)])
def test_end_of_dataloader_only_on_the_last_batch(n, batches):
    loader = _shard_loader(n=n)
    flags = []
    for _ in loader:
        flags.append(loader.end_of_dataloader)
    assert flags == [False] * (batches - 1) + [True]
    assert [loader.end_of_dataloader for _ in loader] == flags  # reset on every pass


def test_loader_exposes_the_gradient_state_it_reports_to():
    """Accelerate's ``DataLoaderShard.gradient_state``: the process-wide GradientState, in
    which the loader is the active one while it is iterated."""
    from accel_state import GradientState

    loader = _shard_loader(n=6)
    assert loader.gradient_state is not None
    assert loader.gradient_state.__dict__ is GradientState().__dict__
    for _ in loader:
        assert loader.gradient_state.active_dataloader is loader
    assert loader.gradient_state.active_dataloader is not loader


def test_empty_loader_yields_nothing():
    loader = DataLoaderShard(_dataset(0), batch_size=2)
    assert list(loader) == [] and loader.end_of_dataloader is False


class _Counting(DataLoaderShard):
    """Records the begin/end hooks the GradientState wiring builds on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = []

    def begin(self):
        super().begin()
        self.events.append("begin")

    def end(self):
        super().end()
        self.events.append("end")


def test_begin_and_end_bracket_each_pass_even_when_abandoned():
    loader = _Counting(_dataset(10), batch_size=4)
    list(loader)
    assert loader.events == ["begin", "end"] and loader.iteration == 1
    for _ in loader:
        break
    assert loader.events == ["begin", "end", "begin", "end"]
    assert loader.iteration == 1  # an abandoned pass does not advance the epoch


def test_set_epoch_changes_the_order_and_passes_advance_it():
    sampler = SeedableRandomSampler(range(12), data_seed=1)
    loader = _shard_loader(n=12, batch_size=2, sampler=sampler)

    def order():
        return [i for _, idx in loader for i in idx.tolist()]

    loader.set_epoch(0)
    epoch0 = order()
    assert loader.iteration == 1 and sampler.epoch == 1
    epoch1 = order()
    assert epoch0 != epoch1
    loader.set_epoch(0)
    assert order() == epoch0
    loader.set_epoch(1)
    assert order() == epoch1


class _EpochDataset(TensorDataset):
    def __init__(self):
        super().__init__(torch.arange(4))
        self.epochs = []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def test_set_epoch_reaches_the_dataset():
    dataset = _EpochDataset()
    loader = DataLoaderShard(dataset, batch_size=2)
    loader.set_epoch(7)
    list(loader)
    assert dataset.epochs == [7, 7] and loader.iteration == 8


def test_sizes_and_remainder():
    loader = _shard_loader(n=10, batch_size=3, num=2)
    assert loader.total_batch_size == 6 and loader.total_dataset_length == 10
    list(loader)
    assert loader.remainder == 4
    plain = DataLoaderShard(_dataset(8), batch_size=4, drop_last=True)
    assert plain.total_batch_size == 4
    list(plain)
    assert plain.remainder == -1  # nothing is padded when the tail is dropped


def test_get_and_set_sampler():
    loader = _shard_loader()
    assert isinstance(loader.get_sampler(), SequentialSampler)
    new = SeedableRandomSampler(range(10), data_seed=0)
    loader.set_sampler(new)
    assert loader.get_sampler() is new
    unbatched = DataLoaderShard(_dataset(4), batch_size=None)
    with pytest.raises(ConfigurationError, match="new DataLoader"):
        unbatched.set_sampler(new)


def test_pickle_round_trip():
    loader = _shard_loader(device="cpu")
    clone = pickle.loads(pickle.dumps(loader))
    assert [b[1].tolist() for b in clone] == [b[1].tolist() for b in loader]


def test_worker_processes():
    loader = _shard_loader(n=10, num=2, rank=1, num_workers=1)
    assert [b[1].tolist() for b in loader] == [[3, 4, 5], [9, 0, 1]]


def test_gradient_state_sees_the_active_loader_and_its_last_batch():
    from accel_state import GradientState

    state = GradientState()
    outer, inner = _shard_loader(n=4), _shard_loader(n=7)
    seen = []
    for _ in outer:
        assert state.active_dataloader is outer
        for _ in inner:
            seen.append((state.active_dataloader is inner, state.end_of_dataloader))
        assert state.active_dataloader is outer
    assert seen[-1] == (True, True) and all(active for active, _ in seen)
    assert [end for _, end in seen[:2]] == [False, True]  # rank 0 of 2: two batches of 3
    assert not state.in_dataloader and state.remainder == -1


def test_host_to_cuda_copies_are_always_queued_without_a_stall():
    """A blocking host->CUDA copy waits for the previous step's kernels (measured 4% of a
    small step on an H200); such copies are stream-ordered, so they are always async."""
    from accel_data.placement import async_safe as _async_safe

    assert _async_safe(torch.device("cuda", 0)) and _async_safe(torch.device("cuda"))
    assert not _async_safe(torch.device("cpu")) and not _async_safe(None)

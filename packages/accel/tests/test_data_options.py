"""The Accelerator's data options: dataloader_config, deprecated split_batches=, data methods."""

from __future__ import annotations

import warnings

import pytest
import torch
from accel_data import DataLoaderDispatcher, SeedableRandomSampler
from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader

import accel
from accel import Accelerator, DataLoaderConfiguration


def test_config_reaches_properties_and_loaders():
    config = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=4, even_batches=False,
                                     non_blocking=True)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    assert accelerator.dataloader_config is config
    assert (accelerator.split_batches, accelerator.dispatch_batches, accelerator.even_batches,
            accelerator.use_seedable_sampler, accelerator.non_blocking,
            accelerator.use_stateful_dataloader) == (False, None, False, True, True, False)
    loader = accelerator.prepare(DataLoader(list(range(8)), batch_size=2, shuffle=True))
    assert isinstance(loader.get_sampler(), SeedableRandomSampler)
    assert loader.get_sampler().initial_seed == 4 and loader.non_blocking
    assert accelerator._dataloaders == [loader]
    assert not isinstance(loader, DataLoaderDispatcher)


def test_deprecated_split_batches():
    with pytest.warns(FutureWarning, match="dataloader_config"):
        accelerator = Accelerator(cpu=True, split_batches=True)
    assert accelerator.split_batches is True
    with pytest.raises(ConfigurationError, match="pass only dataloader_config"):
        Accelerator(cpu=True, split_batches=True,
                    dataloader_config=DataLoaderConfiguration())
    with pytest.raises(ConfigurationError, match="DataLoaderConfiguration"):
        Accelerator(cpu=True, dataloader_config={"split_batches": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Accelerator(cpu=True)  # no warning without the deprecated argument


def test_skip_first_batches_and_gather_for_metrics():
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(torch.arange(7), batch_size=2))
    rest = accelerator.skip_first_batches(loader, 2)
    seen = [accelerator.gather_for_metrics(batch).tolist() for batch in rest]
    assert seen == [[4, 5], [6]]
    assert accelerator.skip_first_batches is not None and accel.skip_first_batches


def test_module_paths():
    import accel.data_loader
    import accel.utils
    import accel_data

    assert accel.utils.DataLoaderConfiguration is accel_data.DataLoaderConfiguration
    assert accel.data_loader.DataLoaderDispatcher is accel_data.DataLoaderDispatcher
    assert accel.data_loader.skip_first_batches is accel_data.skip_first_batches


@pytest.mark.parametrize("dispatch", [True, False])
def test_prepare_gives_accelerates_class_and_the_accelerator_pickles(dispatch):
    import pickle

    from accel_data import DataLoaderShard

    loader = DataLoader(torch.utils.data.TensorDataset(torch.arange(10)))
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        dispatch_batches=dispatch))
    prepared, skipped = accelerator.prepare(loader, accel.skip_first_batches(loader, 2))
    assert isinstance(prepared, DataLoaderDispatcher) == dispatch
    assert isinstance(prepared, DataLoaderShard)
    restored = pickle.loads(pickle.dumps(accelerator))
    again, again_skipped = restored._dataloaders
    assert type(again) is type(prepared) and len(again) == len(prepared) == 10
    assert [b[0].tolist() for b in again] == [b[0].tolist() for b in prepared]
    assert [b[0].tolist() for b in again_skipped] == [[i] for i in range(2, 10)]

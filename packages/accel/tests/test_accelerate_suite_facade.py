"""Facade behaviour Accelerate's own test suite checks (issue 15): names found through the
module that used them, the settable ``sync_gradients``, the reset-state hint, a picklable
Accelerator, saving an offloaded model, the live tracker table, automatic checkpoint names."""

from __future__ import annotations

import pickle
import types

import pytest
import torch
from accel import Accelerator, skip_first_batches
from accel_state.errors import ConfigurationError
from torch import nn
from torch.utils.data import DataLoader


def test_helper_names_resolve_through_accelerates_module_paths():
    import accel.accelerator
    import accel.big_modeling
    import accel.utils
    import accel.utils.modeling
    import accel.utils.other
    from accel.accelerator import DataLoaderConfiguration, GradientAccumulationPlugin

    assert DataLoaderConfiguration is accel.utils.DataLoaderConfiguration
    assert GradientAccumulationPlugin is accel.utils.GradientAccumulationPlugin
    assert accel.accelerator.is_xpu_available is accel.utils.is_xpu_available
    assert accel.utils.modeling.convert_file_size_to_int is accel.utils.convert_file_size_to_int
    assert accel.utils.other.convert_bytes is accel.utils.convert_bytes
    assert accel.big_modeling.attach_layerwise_casting_hooks is \
        accel.utils.attach_layerwise_casting_hooks
    assert nn.Linear in accel.utils.constants.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
    for module, name in ((accel.accelerator, "no_such_helper"), (accel.accelerator, "_private"),
                         (accel.big_modeling, "no_such_helper")):
        with pytest.raises(AttributeError, match=name):
            getattr(module, name)


def test_get_model_tp_size_reads_both_transformers_layouts():
    from accel.utils import get_model_tp_size

    assert get_model_tp_size(nn.Linear(2, 2)) is None
    old = types.SimpleNamespace(tp_size=4)
    new = types.SimpleNamespace(tp_size=None, config=types.SimpleNamespace(
        distributed_config=types.SimpleNamespace(tp_size=2)))
    as_dict = types.SimpleNamespace(config=types.SimpleNamespace(distributed_config={"tp_size": 8}))
    assert [get_model_tp_size(m) for m in (old, new, as_dict)] == [4, 2, 8]


def test_sync_gradients_is_settable():
    accelerator = Accelerator()
    accelerator.sync_gradients = False
    assert accelerator.gradient_state.sync_gradients is False
    accelerator.sync_gradients = True
    assert accelerator.sync_gradients is True


def test_accelerator_state_reset_hint():
    accelerator = Accelerator()
    with pytest.raises(AttributeError, match="'AcceleratorState' object has no attribute 'x'"):
        accelerator.state.x  # noqa: B018
    accelerator.state._reset_state()
    with pytest.raises(AttributeError, match=r"`AcceleratorState._reset_state\(\)` was called"):
        accelerator.num_processes  # noqa: B018


def test_pickled_accelerator_keeps_its_loaders_and_their_skip():
    loader = DataLoader(torch.arange(10), batch_size=1)
    accelerator = Accelerator()
    whole, skipped = accelerator.prepare(loader, skip_first_batches(loader, 2))
    assert len(skipped) == 8
    copy = pickle.loads(pickle.dumps(accelerator))
    assert [len(dl) for dl in copy._dataloaders] == [10, 8]
    assert [b.item() for b in copy._dataloaders[1]] == list(range(2, 10))


def test_save_model_writes_the_weights_of_an_offloaded_model(tmp_path):
    from accel.big_modeling import load_checkpoint_and_dispatch
    from accel.utils import load_checkpoint_in_model

    accelerator = Accelerator()
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    accelerator.save_model(model, tmp_path / "full")
    load_checkpoint_and_dispatch(model, tmp_path / "full", device_map={"0": "cpu", "1": "disk"},
                                 offload_folder=tmp_path / "offload")
    assert model[1].weight.device.type == "meta"
    accelerator.save_model(model, tmp_path / "again")
    fresh = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    load_checkpoint_in_model(fresh, tmp_path / "again")
    for key, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, reference[key]), key


def test_logger_table_follows_the_tracker_registry():
    from accel.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker, register_tracker_class

    class Mine(GeneralTracker):
        name = "accel_suite_mine"
        requires_logging_directory = False

    snapshot = dict(LOGGER_TYPE_TO_CLASS)
    assert "wandb" in snapshot and "accel_suite_mine" not in LOGGER_TYPE_TO_CLASS
    try:
        register_tracker_class(Mine)
        assert LOGGER_TYPE_TO_CLASS["accel_suite_mine"] is Mine
        del LOGGER_TYPE_TO_CLASS["accel_suite_mine"]
        assert "accel_suite_mine" not in LOGGER_TYPE_TO_CLASS
        LOGGER_TYPE_TO_CLASS["accel_suite_mine"] = Mine  # a dict write registers too
        assert Accelerator(log_with="accel_suite_mine").log_with  # usable by name
        LOGGER_TYPE_TO_CLASS.clear()  # Accelerate's tests snapshot and restore it
        assert len(LOGGER_TYPE_TO_CLASS) == 0
    finally:
        LOGGER_TYPE_TO_CLASS.clear()
        LOGGER_TYPE_TO_CLASS.update(snapshot)
    assert dict(LOGGER_TYPE_TO_CLASS) == snapshot


def test_automatic_naming_takes_the_accelerators_project_dir(tmp_path):
    from accel.utils import ProjectConfiguration

    config = ProjectConfiguration(automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_dir=tmp_path, project_config=config)
    accelerator.prepare(nn.Linear(2, 2))
    accelerator.save_state()
    assert (tmp_path / "checkpoints" / "checkpoint_0").is_dir()
    with pytest.raises(ConfigurationError, match="needs a project_dir"):
        Accelerator(project_config=ProjectConfiguration(automatic_checkpoint_naming=True))

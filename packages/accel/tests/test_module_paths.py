"""Accelerate's module paths re-export the very objects of the micro-packages."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["accel.utils.dataclasses", "accel.utils.operations",
                                    "accel.utils.random", "accel.utils.environment",
                                    "accel.utils.imports"])
def test_every_submodule_name_is_also_in_accel_utils(module):
    import accel.utils

    sub = importlib.import_module(module)
    missing = [name for name in sub.__all__
               if getattr(accel.utils, name, None) is not getattr(sub, name)]
    assert missing == []


def test_configuration_classes_are_the_packages_own():
    import accel_checkpoint.project
    import accel_data
    import accel_state
    from accel.utils.dataclasses import (
        DataLoaderConfiguration,
        GradientAccumulationPlugin,
        ProjectConfiguration,
    )

    assert DataLoaderConfiguration is accel_data.DataLoaderConfiguration
    assert ProjectConfiguration is accel_checkpoint.project.ProjectConfiguration
    assert GradientAccumulationPlugin is accel_state.GradientAccumulationPlugin


def test_new_utils_paths_are_the_canonical_objects():
    import accel.utils
    import accel_checkpoint.constants
    import accel_checkpoint.fsdp_io
    import accel_checkpoint.merge
    import accel_parallel.fsdp.plugin
    import accel_state.imports
    import accel_tracking
    from accel.utils import constants, fsdp_utils, other, versions
    from accel.utils.tqdm import tqdm

    for name in ("save_fsdp_model", "load_fsdp_model", "save_fsdp_optimizer",
                 "load_fsdp_optimizer"):
        assert getattr(fsdp_utils, name) is getattr(accel_checkpoint.fsdp_io, name)
        assert getattr(accel.utils, name) is getattr(accel_checkpoint.fsdp_io, name)
    assert fsdp_utils.merge_fsdp_weights is accel_checkpoint.merge.merge_fsdp_weights
    assert constants.FSDP_MODEL_NAME is accel_checkpoint.constants.FSDP_MODEL_NAME
    assert constants.FSDP_STATE_DICT_TYPE is accel_parallel.fsdp.plugin.FSDP_STATE_DICT_TYPE
    assert versions.compare_versions is accel_state.imports.compare_versions
    assert other.is_peft_model is accel.utils.is_peft_model is accel_state.imports.is_peft_model
    assert tqdm is accel.utils.tqdm is accel_tracking.tqdm


def test_deepspeed_scheduler_wrapper_is_the_engine_scheduler():
    """transformers' Trainer imports ``DeepSpeedSchedulerWrapper`` and checks prepared
    schedulers against it: it is the scheduler the DeepSpeed engine steps itself."""
    import accel_parallel.deepspeed.strategy
    import torch
    from accel.utils import DeepSpeedSchedulerWrapper

    # the one class
    assert DeepSpeedSchedulerWrapper is accel_parallel.deepspeed.strategy.EngineScheduler
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0)
    inner = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    wrapped = DeepSpeedSchedulerWrapper(inner, optimizer)
    wrapped.step()  # the engine steps it: a no-op here
    assert wrapped.get_last_lr() == [1.0]


@pytest.mark.parametrize(("module", "name", "home"), [
    ("accel.commands.env", "env_command", "accel_launch.env_command"),
    ("accel.commands.estimate", "estimate_command", "accel_inference.cli_estimate"),
    ("accel.commands.merge", "merge_command", "accel_checkpoint.cli_merge"),
    ("accel.commands.to_fsdp2", "convert_config_to_fsdp2", "accel_launch.to_fsdp2"),
    ("accel.commands.config", "write_basic_config", "accel_launch.config_command"),
    ("accel.commands.config.default", "write_basic_config", "accel_launch.config_command"),
    ("accel.commands.config.update", "update_config", "accel_launch.config_command"),
])
def test_command_paths_are_the_cli_verbs_own(module, name, home):
    assert getattr(importlib.import_module(module), name) is getattr(
        importlib.import_module(home), name)


def test_to_fsdp2_command_reads_through_its_modules_load_config(tmp_path, monkeypatch, caplog):
    """Accelerate's to_fsdp2_command reads the file through its module's load_config, which
    its tests replace; the renamed and dropped keys are logger warnings."""
    import accel.commands.to_fsdp2 as module

    source = tmp_path / "c.yaml"
    source.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n")
    monkeypatch.setattr(module, "load_config", lambda path: {"fsdp_config": {"fsdp_version": 2}})
    args = module.to_fsdp2_command_parser().parse_args(
        ["--config_file", str(source), "--output_file", str(tmp_path / "out.yaml")])
    assert args.func is module.to_fsdp2_command
    with caplog.at_level("WARNING"):
        assert module.to_fsdp2_command(args) == 0
    assert "Config already specifies FSDP2, skipping conversion..." in caplog.text


def test_accelerate_test_command_is_accel_test():
    import accel_launch.selftest
    from accel.commands.test import test_command

    assert test_command is accel_launch.selftest.run_selftest


def test_commands_config_is_a_package_and_config_args_loads_a_file(tmp_path):
    import accel.commands.config
    from accel.commands.config.config_args import ClusterConfig, load_config_from_file

    assert hasattr(accel.commands.config, "__path__")  # a package, so .config_args exists
    path = tmp_path / "config.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\n"
                    "num_processes: 2\nmixed_precision: bf16\n")
    config = load_config_from_file(path)  # Accelerate's: a ClusterConfig
    assert isinstance(config, ClusterConfig)
    assert config.num_processes == 2 and config.mixed_precision == "bf16"
    json_path = tmp_path / "config.json"
    json_path.write_text('{"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO", '
                         '"num_processes": 3}')
    assert load_config_from_file(json_path).num_processes == 3
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config_from_file(tmp_path / "missing.yaml")


def test_deepspeed_required_refuses_a_run_without_deepspeed():
    from accel import Accelerator
    from accel.utils import deepspeed_required
    from accel_state import ConfigurationError

    @deepspeed_required
    def zero3_only():
        return "ran"

    assert zero3_only() == "ran"  # no Accelerator yet: nothing to check against
    Accelerator(cpu=True)
    with pytest.raises(ConfigurationError, match="zero3_only needs DeepSpeed.*deepspeed_plugin"):
        zero3_only()

"""Names accel adds for Accelerate 1.15's surface behave: Megatron-LM / TPU / SageMaker ones
import and refuse on use with the pointer, the small helpers answer as Accelerate's do, and
a module's incidental names are the very objects of the public modules."""

from __future__ import annotations

import sys

import accel.utils
import accel.utils.dataclasses
import accel.utils.fsdp_utils
import accel.utils.modeling
import accel.utils.operations
import accel.utils.other
import accel.utils.versions
import pytest
from accel_state.errors import ConfigurationError


def test_megatron_lm_plugin_imports_where_accelerate_has_it_and_refuses_on_use():
    from accel.utils import MegatronLMPlugin
    from accel.utils.dataclasses import MegatronLMPlugin as from_dataclasses

    assert MegatronLMPlugin is from_dataclasses is accel.utils.megatron_lm.MegatronLMPlugin
    with pytest.raises(ConfigurationError, match="MegatronLMPlugin.*ParallelismConfig"):
        MegatronLMPlugin(tp_degree=2)


def test_accelerator_refuses_a_megatron_lm_plugin_pointing_at_parallelism_config():
    from accel import Accelerator

    with pytest.raises(ConfigurationError, match="megatron_lm_plugin.*ParallelismConfig"):
        Accelerator(cpu=True, megatron_lm_plugin=object())


@pytest.mark.parametrize("name", ["MegatronEngine", "GPTTrainStep", "MegatronLMDummyScheduler",
                                  "megatron_lm_initialize", "avg_losses_across_data_parallel_group",
                                  "megatron_lm_prepare_data_loader"])
def test_every_megatron_name_refuses_with_the_torch_native_pointer(name):
    obj = getattr(accel.utils, name)
    with pytest.raises(ConfigurationError, match="torch-native parallelism"):
        obj()


def test_a_train_step_can_still_be_subclassed_at_import_time():
    class MyStep(accel.utils.AbstractTrainStep):
        pass

    with pytest.raises(ConfigurationError, match="MyStep"):
        MyStep()


@pytest.mark.parametrize(("call", "word"), [
    (lambda: accel.utils.install_xla(), "TPU"),
    (lambda: accel.utils.prepare_tpu(None, {}), "TPU"),
    (lambda: accel.utils.prepare_sagemager_args_inputs(None, None), "SageMaker"),
    (lambda: accel.data_loader.MpDeviceLoaderWrapper(None, "xla"), "TPU"),
])
def test_tpu_and_sagemaker_entry_points_refuse_with_the_reason(call, word):
    import accel.data_loader  # noqa: F401

    with pytest.raises(ConfigurationError, match=f"refused: .*{word}.*not supported"):
        call()


def test_constants_hold_accelerates_values():
    from accel.utils.constants import (
        BETA_CP_AVAILABLE_PYTORCH_VERSION,
        FSDP2_PYTORCH_VERSION,
        STR_OPERATION_TO_FUNC,
        TORCH_DISTRIBUTED_OPERATION_TYPES,
    )

    assert BETA_CP_AVAILABLE_PYTORCH_VERSION == FSDP2_PYTORCH_VERSION == "2.6.0"
    assert STR_OPERATION_TO_FUNC[">="](2, 1) and not STR_OPERATION_TO_FUNC["<"](2, 1)
    assert {"MULTI_CPU", "MULTI_GPU", "FSDP"} <= set(TORCH_DISTRIBUTED_OPERATION_TYPES)
    assert accel.utils.BETA_CP_AVAILABLE_PYTORCH_VERSION == "2.6.0"


def test_small_helpers_answer_as_accelerates():
    nested = {"a": {"x": 1}, "b": 2}
    assert accel.utils.merge_dicts({"a": {"y": 2}, "c": 3}, nested) == {
        "a": {"x": 1, "y": 2}, "b": 2, "c": 3}
    assert accel.utils.get_pretty_name(accel.utils.merge_dicts) == "merge_dicts"
    assert accel.utils.get_pretty_name(ConfigurationError("x")) == "ConfigurationError"
    assert accel.utils.are_libraries_initialized("sys", "no_such_lib_xyz") == ["sys"]
    assert isinstance(accel.utils.other.get_free_port(), int)
    assert accel.utils.modeling.check_device_same("cpu", "cpu")
    assert not accel.utils.modeling.check_device_same("cpu", "meta")
    codes = accel.utils.operations.TENSOR_TYPE_TO_INT
    assert accel.utils.operations.TENSOR_INT_TO_DTYPE[codes[__import__("torch").bfloat16]] \
        is __import__("torch").bfloat16


def test_grad_scaler_helpers_build_a_torch_scaler():
    import torch

    scaler = accel.utils.get_grad_scaler(enabled=False)
    assert isinstance(scaler, torch.amp.GradScaler)
    assert isinstance(accel.utils.fsdp_utils.get_fsdp2_grad_scaler(enabled=False),
                      torch.amp.GradScaler)


def test_incidental_names_are_the_objects_of_the_public_modules():
    import accel.hooks
    import accel.state

    assert accel.hooks.send_to_device is accel.utils.send_to_device
    assert accel.state.is_mlu_available is accel.utils.is_mlu_available
    with pytest.raises(AttributeError, match="no_such_name"):
        accel.state.no_such_name  # noqa: B018


def test_write_basic_config_is_exported_where_accelerate_has_it(tmp_path):
    import accel.commands.config.default as default
    from accel_launch.config_command import write_basic_config

    assert accel.utils.write_basic_config is default.write_basic_config is write_basic_config
    target = tmp_path / "default_config.yaml"
    assert accel.utils.write_basic_config("bf16", save_location=str(target)) == target
    assert "mixed_precision: bf16" in target.read_text()
    assert accel.utils.write_basic_config(save_location=str(target)) is False


def test_torch_version_is_parsed():
    import torch

    assert str(accel.utils.versions.torch_version) in torch.__version__
    assert "packaging" in sys.modules


def test_commands_modules_hold_accelerates_cli_objects():
    import accel
    import accel.commands.accelerate_cli as cli
    import accel.commands.config as config
    import accel.commands.config.config_args as config_args
    import accel.commands.env as env
    import accel.commands.merge as merge
    import accel.commands.tpu as tpu
    import accel.commands.utils as cmd_utils
    import accel_launch.cli
    from accel_launch.config_classes import BaseConfig, ClusterConfig
    from accel_launch.parser import AccelArgumentParser

    assert cli.main is accel_launch.cli.main and env.version == accel.__version__
    assert cmd_utils.CustomArgumentParser is AccelArgumentParser
    assert config_args.BaseConfig is BaseConfig and issubclass(config_args.ClusterConfig,
                                                                config_args.BaseConfig)
    assert ClusterConfig is config_args.ClusterConfig
    assert config_args.DistributedType is accel.utils.DistributedType
    assert merge.merge_command_parser().prog == "accel merge-weights"
    assert config.get_config_parser().prog == "accel config"
    assert tpu.tpu_command_parser().prog == "accel tpu-config"
    with pytest.raises(ConfigurationError, match="TPU"):
        tpu.tpu_command_launcher(tpu.tpu_command_parser().parse_args([]))


def test_utils_submodules_are_attributes_after_importing_accel_utils():
    import subprocess

    probe = ("import types, accel.utils as u; names = ['ao', 'bnb', 'constants', 'dataclasses', "
             "'environment', 'fsdp_utils', 'imports', 'launch', 'megatron_lm', 'memory', "
             "'modeling', 'offload', 'operations', 'other', 'random', 'torch_xla', "
             "'transformer_engine', 'versions']; print([n for n in names if not "
             "isinstance(vars(u).get(n), types.ModuleType)]); assert callable(u.tqdm)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


@pytest.mark.parametrize("name", ["ACCELERATE_USE_MEGATRON_LM", "ACCEL_USE_MEGATRON_LM"])
def test_the_megatron_switch_in_the_environment_is_refused_naming_it(monkeypatch, name):
    """Accelerate builds a MegatronLMPlugin from ACCELERATE_USE_MEGATRON_LM=true; accel
    refuses it (it used to be ignored), and a false value changes nothing."""
    from accel import Accelerator

    monkeypatch.setenv(name, "false")
    Accelerator(cpu=True)
    monkeypatch.setenv(name, "true")
    with pytest.raises(ConfigurationError, match=f"{name}=true asks for Megatron-LM.*"
                                                 "ParallelismConfig"):
        Accelerator(cpu=True)

"""Accelerate 1.15 surface of accel-launch: the config classes, `accel tpu-config`'s refusal
and the CLI's wording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accel_launch.cli import main
from accel_launch.config_classes import BaseConfig, ClusterConfig, SageMakerConfig
from accel_state.enums import ComputeEnvironment, DistributedType
from accel_state.errors import ConfigurationError


def _cluster() -> ClusterConfig:
    return ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type="MULTI_GPU",
                         mixed_precision="bf16", use_cpu=False, debug=False, num_processes=2)


def test_cluster_config_converts_enums_and_drops_empty_sections():
    cfg = _cluster()
    assert cfg.distributed_type is DistributedType.MULTI_GPU
    assert cfg.compute_environment is ComputeEnvironment.LOCAL_MACHINE
    assert cfg.fsdp_config == {} and issubclass(ClusterConfig, BaseConfig)
    data = cfg.to_dict()
    assert data["distributed_type"] == "MULTI_GPU" and data["num_processes"] == 2
    assert "fsdp_config" not in data and "gpu_ids" not in data
    assert cfg.fsdp_config == {}  # to_dict leaves the object alone


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_config_files_round_trip(tmp_path: Path, suffix: str):
    path = tmp_path / f"cfg.{suffix}"
    getattr(_cluster(), f"to_{suffix}_file")(path)
    back = getattr(ClusterConfig, f"from_{suffix}_file")(path)
    assert back.to_dict() == _cluster().to_dict()


def test_old_keys_are_migrated_and_defaults_filled(tmp_path: Path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"distributed_type": "NO", "fp16": True,
                                "dynamo_backend": "INDUCTOR"}))
    cfg = ClusterConfig.from_json_file(path)
    assert cfg.mixed_precision == "fp16" and cfg.num_processes == 1
    assert cfg.dynamo_config == {"dynamo_backend": "INDUCTOR"} and cfg.use_cpu is False


def test_unknown_keys_are_named_with_the_file_and_the_fix(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("distributed_type: NO\nnum_procesess: 2\n")
    with pytest.raises(ConfigurationError, match=r"bad.yaml has unknown keys \['num_procesess'\]"
                                                 r".*accel config update"):
        ClusterConfig.from_yaml_file(path)
    path.write_text("mixed_precision: bf16\n")
    with pytest.raises(ConfigurationError, match="no distributed_type"):
        ClusterConfig.from_yaml_file(path)


def test_a_bad_distributed_type_is_named():
    with pytest.raises(ConfigurationError, match="'MULTI_TPU' is not one of"):
        ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type="MULTI_TPU",
                      mixed_precision="no", use_cpu=False, debug=False)


def test_sagemaker_config_is_refused_with_the_reason(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="SageMaker launches are not supported"):
        SageMakerConfig(compute_environment="AMAZON_SAGEMAKER",
                        distributed_type="DATA_PARALLEL", mixed_precision="no", use_cpu=False,
                        debug=False, ec2_instance_type="ml.p3.2xlarge", iam_role_name="r")


def test_tpu_config_verb_parses_accelerates_flags_then_refuses(capsys):
    assert main(["tpu-config", "--tpu_name", "pod", "--command", "echo", "hi", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "tpu-config (--tpu_name pod) is not supported" in err and "TPU" in err
    with pytest.raises(SystemExit):
        main(["tpu-config", "--tpu_nmae", "pod"])
    assert "--tpu_nmae" in capsys.readouterr().err


def test_tpu_command_parser_is_accelerates_builder():
    import argparse

    from accel_launch.tpu_command import tpu_command_launcher, tpu_command_parser

    assert tpu_command_parser().prog == "accel tpu-config"
    sub = argparse.ArgumentParser().add_subparsers()
    assert tpu_command_parser(sub) is sub.choices["tpu-config"]
    with pytest.raises(ConfigurationError, match="TPU"):
        tpu_command_launcher(tpu_command_parser().parse_args([]))


def test_config_default_says_accel_configuration_saved(tmp_path: Path, capsys):
    target = tmp_path / "c.yaml"
    assert main(["config", "default", "--config_file", str(target)]) == 0
    assert f"accel configuration saved at {target}" in capsys.readouterr().out


def test_dry_run_names_the_config_file_once(tmp_path: Path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("distributed_type: NO\nmixed_precision: 'no'\nuse_cpu: true\n")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert main(["launch", "--dry_run", "--config_file", str(cfg), str(script)]) == 0
    out = capsys.readouterr().out
    assert f"config: config file {cfg}" in out and "config config" not in out


def test_launch_banner_names_the_config_file_once(tmp_path: Path):
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text("distributed_type: NO\nmixed_precision: 'no'\nuse_cpu: true\n")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    result = subprocess.run([sys.executable, "-m", "accel_launch", "launch", "--config_file",
                             str(cfg), str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"(CPU, config file {cfg})" in result.stderr and "config config" not in result.stderr


def test_config_sub_command_builders_stand_alone_or_join_given_subparsers(tmp_path: Path):
    import argparse

    from accel_launch.cli_compat import default_command_parser, update_command_parser

    args = default_command_parser().parse_args(["--mixed_precision", "bf16"])
    assert args.mixed_precision == "bf16" and args.func.__name__ == "_default_command"
    sub = argparse.ArgumentParser().add_subparsers()
    assert default_command_parser(sub, parents=[]) is sub.choices["default"]
    assert update_command_parser(sub) is sub.choices["update"]
    assert update_command_parser().parse_args(["--config_file", "c.yaml"]).config_file == "c.yaml"


def test_verb_main_runs_the_accel_verb_on_sys_argv(tmp_path: Path, monkeypatch, capsys):
    from accel_launch.cli_compat import verb_main

    target = tmp_path / "c.yaml"
    monkeypatch.setattr("sys.argv", ["accelerate-config", "default", "--config_file",
                                     str(target)])
    assert verb_main("config")() == 0 and target.exists()


def test_launcher_functions_launch_or_refuse(tmp_path: Path, capsys):
    from accel_launch.cli_compat import (
        clean_option,
        get_sagemaker_input,
        sagemaker_launcher,
        simple_launcher,
        tpu_pod_launcher,
    )
    from accel_launch.launch import launch_command_parser

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    args = launch_command_parser().parse_args(["--dry_run", "--cpu", str(script)])
    assert simple_launcher(args) == 0 and "nothing was started" in capsys.readouterr().out
    with pytest.raises(ConfigurationError, match="tpu_pod_launcher.*TPU"):
        tpu_pod_launcher(args)
    with pytest.raises(ConfigurationError, match="SageMaker"):
        sagemaker_launcher(None, args)
    with pytest.raises(ConfigurationError, match="SageMaker"):
        get_sagemaker_input()
    assert clean_option("--num-processes") == "num_processes" and clean_option("-q") is None


def test_get_cluster_input_turns_the_answers_into_a_cluster_config(monkeypatch):
    import io

    from accel_launch.cli_compat import get_cluster_input

    monkeypatch.setattr("sys.stdin", io.StringIO("\n" * 40))  # every default answer
    cfg = get_cluster_input()
    assert isinstance(cfg, ClusterConfig) and cfg.compute_environment.value == "LOCAL_MACHINE"


@pytest.mark.parametrize(("value", "refused"), [("true", True), ("false", False)])
def test_activation_offload_in_a_config_file_is_refused_naming_the_file(tmp_path: Path, capsys,
                                                                      value, refused):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("distributed_type: NO\nuse_cpu: true\nfsdp_config:\n"
                   f"  fsdp_activation_checkpointing_offload: {value}\n")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = main(["launch", "--dry_run", "--config_file", str(cfg), str(script)])
    err = capsys.readouterr().err
    assert code == (2 if refused else 0), err
    if refused:
        assert f"from config file {cfg}" in err and "not implemented by accel's FSDP2" in err

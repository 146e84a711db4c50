"""accel_launch.to_fsdp2's tables (Accelerate's names) drive the conversion, and load_config;
options_to_group; prepare_extend_env_parallelism_config."""

from __future__ import annotations

import pytest
from accel_state.errors import ConfigurationError

from accel_launch import to_fsdp2
from accel_launch.cli_compat import options_to_group
from accel_launch.flags import GROUPS
from accel_launch.to_fsdp2 import ARGUMENT_KEY_MAPPING, ARGUMENT_VALUE_MAPPING, ConversionStatus


def test_the_tables_are_what_the_conversion_does():
    fsdp1 = {"fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_offload_params": False,
             "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_forward_prefetch": True,
             "fsdp_use_orig_params": True, "fsdp_sync_module_states": True, "custom": 1}
    out = to_fsdp2.convert_config_to_fsdp2({"fsdp_config": fsdp1})["fsdp_config"]
    dropped = {k for k, v in ARGUMENT_KEY_MAPPING.items() if isinstance(v, ConversionStatus)}
    assert not dropped & set(out) and out["custom"] == 1 and out["fsdp_version"] == 2
    target = ARGUMENT_KEY_MAPPING["fsdp_sharding_strategy"]
    assert out[target] is ARGUMENT_VALUE_MAPPING["fsdp_sharding_strategy"]["SHARD_GRAD_OP"]
    assert ARGUMENT_KEY_MAPPING["fsdp_forward_prefetch"] is ConversionStatus.NOT_YET_IMPLEMENTED
    assert "NO_SHARD" not in ARGUMENT_VALUE_MAPPING["fsdp_sharding_strategy"]  # refused: DDP


def test_load_config_reads_a_mapping_and_refuses_empty_or_missing(tmp_path):
    good = tmp_path / "c.yaml"
    good.write_text("fsdp_config:\n  fsdp_version: 1\n")
    assert to_fsdp2.load_config(good) == {"fsdp_config": {"fsdp_version": 1}}
    empty = tmp_path / "e.yaml"
    empty.write_text("")
    with pytest.raises(ConfigurationError, match="is empty"):
        to_fsdp2.load_config(empty)
    with pytest.raises(FileNotFoundError, match="not found"):
        to_fsdp2.load_config(tmp_path / "missing.yaml")
    listed = tmp_path / "l.yaml"
    listed.write_text("- 1\n")
    with pytest.raises(ConfigurationError, match="not a mapping"):
        to_fsdp2.load_config(listed)


def test_options_to_group_names_sections_of_the_launch_help():
    titles = {group.title for group in GROUPS}
    assert set(options_to_group) == {"multi_gpu", "tpu", "use_deepspeed", "use_fsdp",
                                     "use_megatron_lm", "fp8_backend"}
    assert set(options_to_group.values()) <= titles


def test_prepare_extend_env_parallelism_config_writes_the_given_sizes():
    from accel_launch.launch import launch_command_parser
    from accel_launch.launch_utils import prepare_extend_env_parallelism_config

    args = launch_command_parser().parse_args(
        ["--parallelism_config_tp_size", "2", "--parallelism_config_cp_size", "1", "train.py"])
    env = {"KEEP": "1"}
    assert prepare_extend_env_parallelism_config(args, env) is env
    assert env["KEEP"] == "1" and env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    assert env["PARALLELISM_CONFIG_TP_SIZE"] == env["ACCEL_PARALLELISM_CONFIG_TP_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_CP_SIZE"] == "1"
    assert "PARALLELISM_CONFIG_SP_SIZE" not in env  # not given: the worker's default

"""AccelArgumentParser: both flag spellings, no prefix matching, strict unknown flags."""

from __future__ import annotations

import argparse

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.parser import AccelArgumentParser, alternate_spellings


def test_alternate_spellings_of_long_flags_only() -> None:
    assert alternate_spellings(["--num_processes"]) == ["--num-processes"]
    assert alternate_spellings(["--main-process-ip"]) == ["--main_process_ip"]
    assert alternate_spellings(["-m", "--module"]) == []


@pytest.mark.parametrize("flag", ["--num_processes", "--num-processes"])
def test_both_spellings_set_the_same_destination(flag: str) -> None:
    args = launch_command_parser().parse_args([flag, "3", "train.py"])
    assert args.num_processes == 3


def test_twins_work_inside_argument_groups_and_mixed_spellings() -> None:
    args = launch_command_parser().parse_args(
        ["--num-cpu-threads-per-process", "2", "--main_process_port", "1234",
         "--mixed-precision", "bf16", "--no-python", "prog"])
    assert (args.num_cpu_threads_per_process, args.main_process_port) == (2, 1234)
    assert args.mixed_precision == "bf16" and args.no_python


def test_script_arguments_are_passed_through_untouched() -> None:
    args = launch_command_parser().parse_args(
        ["--cpu", "train.py", "--num-processes", "7", "--cpu", "-m", "x", "--foo_bar=1"])
    assert args.training_script == "train.py"
    assert args.training_script_args == ["--num-processes", "7", "--cpu", "-m", "x",
                                         "--foo_bar=1"]
    assert args.num_processes is None and not args.module


def test_help_shows_the_declared_spelling_only() -> None:
    text = launch_command_parser().format_help()
    assert "--num_processes N" in text
    assert "--num-processes" not in text.replace("(--num-processes)", "")


def test_unknown_flag_is_an_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        launch_command_parser().parse_args(["--num_procs", "2", "train.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: accel launch" in err
    assert "unknown flag --num_procs (did you mean --num_processes?)" in err


def test_prefixes_are_not_silently_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    # Plain argparse would take --num_proc as --num_processes.
    with pytest.raises(SystemExit):
        launch_command_parser().parse_args(["--num_proc", "2", "train.py"])
    assert "--num_proc" in capsys.readouterr().err


def test_declaring_both_spellings_separately_is_a_conflict() -> None:
    parser = AccelArgumentParser(prog="x")
    parser.add_argument("--a_b", "--a-b", dest="both")  # both in one call: fine
    assert parser.parse_args(["--a-b", "2"]).both == "2"
    parser.add_argument("--c_d")
    with pytest.raises(argparse.ArgumentError, match="conflicting option string: --c-d"):
        parser.add_argument("--c-d")


def test_subparsers_inherit_the_class() -> None:
    parser = AccelArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="cmd").add_parser("verb")
    assert isinstance(sub, AccelArgumentParser)
    sub.add_argument("--some_flag", type=int)
    assert parser.parse_args(["verb", "--some-flag", "4"]).some_flag == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["verb", "--other", "4"])
    assert isinstance(parser.parse_args(["verb"]), argparse.Namespace)


# Every `accelerate launch` option (1.x, plus the ones older releases had): an Accelerate
# command line must never fail on "unknown flag" — each is either honoured or refused by
# name with the reason (TPU, SageMaker, Megatron-LM, IPEX/XPU, mpirun, pdsh).
_ACCELERATE_LAUNCH_FLAGS = """
--config_file --quiet -q --cpu --multi_gpu --tpu --ipex --mixed_precision --num_processes
--num_machines --num_cpu_threads_per_process --enable_cpu_affinity --dynamo_backend
--dynamo_mode --dynamo_use_fullgraph --dynamo_use_dynamic --dynamo_use_regional_compilation
--use_deepspeed --use_fsdp --use_parallelism_config --use_megatron_lm --use_xpu --gpu_ids
--same_network --machine_rank --main_process_ip --main_process_port -t --tee --log_dir --role
--rdzv_backend --rdzv_conf --max_restarts --monitor_interval -m --module --no_python
--tpu_cluster --no_tpu_cluster --tpu_use_sudo --vm --env --main_training_function
--downcast_bf16 --deepspeed_config_file --zero_stage --offload_optimizer_device
--offload_param_device --offload_optimizer_nvme_path --offload_param_nvme_path
--gradient_accumulation_steps --gradient_clipping --zero3_init_flag --zero3_save_16bit_model
--deepspeed_hostfile --deepspeed_exclusion_filter --deepspeed_inclusion_filter
--deepspeed_multinode_launcher --deepspeed_moe_layer_cls_names --fsdp_version
--fsdp_offload_params --fsdp_min_num_params --fsdp_sharding_strategy
--fsdp_reshard_after_forward --fsdp_auto_wrap_policy --fsdp_transformer_layer_cls_to_wrap
--fsdp_backward_prefetch_policy --fsdp_backward_prefetch --fsdp_state_dict_type
--fsdp_forward_prefetch --fsdp_use_orig_params --fsdp_cpu_ram_efficient_loading
--fsdp_sync_module_states --fsdp_activation_checkpointing --megatron_lm_tp_degree
--megatron_lm_pp_degree --megatron_lm_num_micro_batches --megatron_lm_sequence_parallelism
--megatron_lm_recompute_activations --megatron_lm_use_distributed_optimizer
--megatron_lm_gradient_clipping --fp8_backend --fp8_use_autocast_during_eval --fp8_margin
--fp8_interval --fp8_format --fp8_amax_history_len --fp8_amax_compute_algo
--fp8_override_linear_precision --fp8_opt_level --fp8_enable_fsdp_float8_all_gather
--fp8_pad_inner_dim --aws_access_key_id --aws_secret_access_key --debug --mpirun_hostfile
--mpirun_ccl --parallelism_config_dp_replicate_size --parallelism_config_dp_shard_size
--parallelism_config_tp_size --parallelism_config_cp_size --parallelism_config_cp_backend
--parallelism_config_cp_comm_strategy --parallelism_config_sp_size
--parallelism_config_sp_backend --parallelism_config_sp_seq_length
--parallelism_config_sp_seq_length_is_variable --parallelism_config_sp_attn_implementation
""".split()


def test_every_accelerate_launch_flag_is_known_in_both_spellings() -> None:
    known = launch_command_parser()._option_string_actions
    missing = [f for f in _ACCELERATE_LAUNCH_FLAGS if f not in known]
    assert not missing, missing
    hyphenated = [f.replace("_", "-") for f in _ACCELERATE_LAUNCH_FLAGS if "_" in f]
    assert not [f for f in hyphenated if f not in known]

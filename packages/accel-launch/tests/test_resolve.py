"""Precedence (command line > config file > cluster > defaults), --dry_run, the worker
environment of every plugin flag, and one clear error per bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from accel_launch.cli import main
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan
from accel_launch.resolve import first_slurm_host, resolve_launch_args
from accel_state.errors import ConfigurationError

CPU_BOX = HostInfo(cpu_count=8, python="/py")
CONFIGS = Path(__file__).parent / "configs"


def _args(*argv: str) -> argparse.Namespace:
    return launch_command_parser().parse_args(list(argv))


def _plan(*argv: str):
    return build_launch_plan(_args(*argv), CPU_BOX, 1234)


def test_command_line_beats_config_file_beats_defaults(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 4\nmixed_precision: bf16\n"
                      "use_cpu: true\n")
    resolved = resolve_launch_args(_args("--config_file", str(config), "--num_processes", "2",
                                         "t.py"))
    args, src = resolved.args, resolved.sources
    assert (args.num_processes, src["num_processes"]) == (2, "command line")
    assert (args.mixed_precision, src["mixed_precision"]) == ("bf16", f"config file {config}")
    assert (args.num_machines, src["num_machines"]) == (1, "default")
    assert args.cpu is True


def test_default_config_file_is_used_when_present(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(CONFIGS / "accelerate_1_x_fsdp.yaml"))
    resolved = resolve_launch_args(_args("t.py"))
    assert resolved.args.use_fsdp is True
    assert resolved.sources["config_file"] == "default location"


def test_dry_run_prints_values_sources_and_environment(tmp_path: Path, capsys) -> None:
    (tmp_path / "t.py").write_text("raise SystemExit('must never run')\n")
    code = main(["launch", "--dry_run", "--config_file",
                 str(CONFIGS / "accelerate_1_x_deepspeed.yaml"), "--num_processes", "1", "--cpu",
                 "--zero-stage", "3", str(tmp_path / "t.py"), "--lr", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "nothing was started" in out
    assert "num_processes = 1  <- command line" in out
    assert f"gradient_accumulation_steps = 4  <- config file {CONFIGS}" in out
    assert "zero_stage = 3  <- command line" in out
    assert "ACCEL_USE_DEEPSPEED=true" in out and "ACCELERATE_USE_DEEPSPEED=true" in out
    assert "ACCELERATE_DEEPSPEED_ZERO_STAGE=3" in out
    assert "ACCELERATE_GRADIENT_CLIPPING=1.0" in out
    assert "ACCELERATE_CONFIG_DS_FIELDS=" in out
    assert "ACCELERATE_MIXED_PRECISION=bf16" in out
    assert "--lr 1" in out


def test_deepspeed_json_as_config_file_runs_deepspeed(tmp_path: Path) -> None:
    ds = tmp_path / "deepspeed_config.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 1}}))
    plan = _plan("--config_file", str(ds), "t.py")
    assert plan.env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert plan.env["ACCEL_DEEPSPEED_CONFIG_FILE"] == str(ds)
    assert plan.env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(ds)
    with pytest.raises(ConfigurationError, match="--zero_stage 2 conflicts with the DeepSpeed"):
        _plan("--config_file", str(ds), "--zero_stage", "2", "t.py")


def test_pipeline_flags_reach_the_workers() -> None:
    env = _plan("--use_parallelism_config", "--parallelism_config_pp_size", "2",
                "--parallelism_config_pp_schedule", "interleaved_1f1b",
                "--parallelism_config_pp_num_microbatches", "8",
                "--parallelism_config_pp_stages_per_rank", "2", "t.py").env
    expected = {"PARALLELISM_CONFIG_PP_SIZE": "2", "ACCEL_PARALLELISM_CONFIG_PP_SIZE": "2",
                "PARALLELISM_CONFIG_PP_SCHEDULE": "interleaved_1f1b",
                "PARALLELISM_CONFIG_PP_NUM_MICROBATCHES": "8",
                "PARALLELISM_CONFIG_PP_STAGES_PER_RANK": "2"}
    for key, value in expected.items():
        assert env.get(key) == value, (key, env.get(key))


def test_every_plugin_flag_reaches_the_workers_under_accelerate_names() -> None:
    env = _plan("--use_fsdp", "--fsdp_version", "2", "--fsdp-offload-params", "true",
                "--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP", "--fsdp_min_num_params", "100",
                "--fsdp_state_dict_type", "FULL_STATE_DICT", "--fsdp_activation_checkpointing",
                "yes", "--fsdp_reshard_after_forward", "false", "--dynamo_backend", "inductor",
                "--dynamo_mode", "max-autotune", "--dynamo_use_fullgraph",
                "--use_parallelism_config", "--parallelism_config_tp_size", "2",
                "--parallelism_config_dp_shard_size", "2", "--mixed_precision", "fp8",
                "--fp8_backend", "ao", "--fp8_pad_inner_dim", "true",
                "--fp8_override_linear_precision", "(false, true, false)",
                "--enable_cpu_affinity", "--gpu_ids", "0,1", "--downcast_bf16", "t.py").env
    expected = {
        "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_OFFLOAD_PARAMS": "true",
        "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP", "FSDP_MIN_NUM_PARAMS": "100",
        "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_ACTIVATION_CHECKPOINTING": "true",
        "FSDP_RESHARD_AFTER_FORWARD": "false", "ACCELERATE_DYNAMO_BACKEND": "inductor",
        "ACCELERATE_DYNAMO_MODE": "max-autotune", "ACCELERATE_DYNAMO_USE_FULLGRAPH": "true",
        "ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_TP_SIZE": "2",
        "PARALLELISM_CONFIG_DP_SHARD_SIZE": "2", "ACCELERATE_MIXED_PRECISION": "fp8",
        "ACCELERATE_FP8_BACKEND": "ao", "ACCELERATE_FP8_PAD_INNER_DIM": "true",
        "ACCELERATE_FP8_OVERRIDE_FPROP": "false", "ACCELERATE_FP8_OVERRIDE_DGRAD": "true",
        "ACCELERATE_FP8_OVERRIDE_WGRAD": "false", "ACCELERATE_CPU_AFFINITY": "true",
        "CUDA_VISIBLE_DEVICES": "0,1", "ACCELERATE_DOWNCAST_BF16": "true",
        # our canonical names too
        "ACCEL_USE_FSDP": "true", "ACCEL_FSDP_OFFLOAD_PARAMS": "true",
        "ACCEL_PARALLELISM_CONFIG_TP_SIZE": "2", "ACCEL_FP8_BACKEND": "ao",
    }
    for key, value in expected.items():
        assert env.get(key) == value, (key, env.get(key))


def test_mixed_precision_no_from_a_config_is_left_to_the_script() -> None:
    plan = _plan("--config_file", str(CONFIGS / "accelerate_0_12.yaml"), "t.py")
    assert "ACCEL_MIXED_PRECISION" not in plan.env
    assert _plan("--mixed_precision", "no", "t.py").env["ACCEL_MIXED_PRECISION"] == "no"


def test_restarts_use_c10d_and_own_stores_per_attempt() -> None:
    plan = _plan("--max_restarts", "2", "t.py")
    assert plan.config["rdzv_backend"] == "c10d" and plan.config["max_restarts"] == 2
    assert plan.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in _plan("t.py").env


def test_srun_one_task_per_node_needs_no_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"SLURM_STEP_NODELIST": "gpu[03-04]", "SLURM_NNODES": "2",
                       "SLURM_NODEID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77"}.items():
        monkeypatch.setenv(key, value)
    args = _args("--main_process_port", "29400", "t.py")
    resolved = resolve_launch_args(args)
    assert (args.num_machines, args.machine_rank, args.main_process_ip) == (2, 1, "gpu03")
    assert resolved.sources["machine_rank"].startswith("SLURM")
    plan = build_launch_plan(args, CPU_BOX, 29400)
    assert plan.config["rdzv_endpoint"] == "gpu03:29400" and plan.config["run_id"] == "77"
    assert first_slurm_host("node7,node[1-3]") == "node7"
    assert first_slurm_host("a[10,12-14]b") == "a10b"


def test_srun_gives_the_port_too(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
                       "SLURM_JOB_ID": "123456"}.items():
        monkeypatch.setenv(key, value)
    args = _args("t.py")  # no flag at all
    resolved = resolve_launch_args(args)
    assert (args.num_machines, args.main_process_ip, args.main_process_port) == (2, "n1", 18456)
    assert resolved.sources["main_process_port"].startswith("SLURM")
    assert build_launch_plan(args, CPU_BOX, 18456).config["rdzv_endpoint"] == "n1:18456"
    monkeypatch.setenv("MASTER_PORT", "29777")  # exported by the batch script: it wins
    assert resolve_launch_args(_args("t.py")).args.main_process_port == 29777
    assert resolve_launch_args(_args("--main_process_port", "1234", "t.py")).sources[
        "main_process_port"] == "command line"


def test_old_fsdp_backward_prefetch_policy_spelling() -> None:
    env = _plan("--use_fsdp", "--fsdp_backward_prefetch_policy", "BACKWARD_POST", "t.py").env
    assert env["FSDP_BACKWARD_PREFETCH"] == "BACKWARD_POST"


def test_mpirun_one_launcher_per_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    with pytest.raises(ConfigurationError, match="--num_machines 3 needs --main_process_ip"):
        _plan("--main_process_port", "29400", "t.py")
    args = _args("--main_process_ip", "10.1.1.1", "--main_process_port", "29400",
                 "--num_processes", "6", "t.py")
    resolved = resolve_launch_args(args)
    assert (args.num_machines, args.machine_rank) == (3, 2)
    assert resolved.sources["num_machines"].startswith("MPI")
    assert build_launch_plan(args, CPU_BOX, 29400).config["nproc_per_node"] == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--zero_stage", "2"], "--zero_stage only applies with --use_deepspeed"),
    (["--fsdp_offload_params", "true"], "--fsdp_offload_params only applies with --use_fsdp"),
    (["--parallelism_config_tp_size", "2"], "only applies with --use_parallelism_config"),
    (["--fp8_backend", "ao"], "--fp8_backend only applies with --mixed_precision fp8"),
    (["--use_deepspeed", "--use_fsdp"], "DeepSpeed (from command line) and FSDP (from command "
     "line) cannot be combined"),
    (["--use_megatron_lm"], "--use_megatron_lm is not supported by accel launch: Megatron-LM's "
     "role is played by torch-native parallelism"),
    (["--megatron_lm_tp_degree", "2"], "--megatron_lm_tp_degree is not supported"),
    (["--tpu"], "--tpu is not supported by accel launch: TPU"),
    (["--tpu_cluster"], "--tpu_cluster is not supported"),
    (["--vm", "x"], "--vm is not supported"),
    (["--aws_access_key_id", "k"], "--aws_access_key_id is not supported by accel launch: "
     "Amazon SageMaker"),
    (["--mpirun_hostfile", "h"], "--mpirun_hostfile is not supported"),
    (["--mpirun-ccl", "2"], "--mpirun_ccl is not supported by accel launch: oneCCL worker "
     "threads belong to Accelerate's mpirun launch"),
    (["--ipex"], "--ipex is not supported by accel launch: Intel Extension for PyTorch"),
    (["--use_xpu"], "--use_xpu is not supported by accel launch: Intel Extension for PyTorch "
     "(IPEX) and Intel XPU devices"),
    (["--use_deepspeed", "--deepspeed_hostfile", "h"], "--deepspeed_hostfile (from command "
     "line) is not supported"),
    (["--use_deepspeed", "--deepspeed_multinode_launcher", "pdsh"], "'pdsh' (from command "
     "line) is not supported"),
    (["--use_fsdp", "--fp8_override_linear_precision", "x"], "only applies with --mixed"),
    (["--mixed_precision", "fp8", "--fp8_override_linear_precision", "(1, 2)"],
     "give three booleans"),
])
def test_bad_combinations_are_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        _plan(*argv, "t.py")
    assert message in str(err.value), str(err.value)


def test_switches_parse_false_like_accelerate_and_the_config_file_still_wins(
        tmp_path: Path) -> None:
    from accel_launch.flags import all_flags

    parsed = _args("t.py")
    switches = [f.dest for f in all_flags() if f.kind == "switch"]
    assert {d: getattr(parsed, d) for d in switches} == dict.fromkeys(switches, False)
    assert all(getattr(parsed, f.dest) is f.parser_default  # None but where Accelerate shows one
               for f in all_flags() if f.kind != "switch")
    assert _args("--multi-gpu", "--debug", "t.py").multi_gpu is True
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: FSDP\ndebug: true\nuse_cpu: true\nnum_processes: 2\n"
                      "downcast_bf16: 'yes'\n")
    resolved = resolve_launch_args(_args("--config_file", str(config), "t.py"))
    args, src = resolved.args, resolved.sources
    # False from the parser is "not given": the config file's true still applies ...
    for dest in ("debug", "use_fsdp", "cpu"):
        assert (getattr(args, dest), src[dest]) == (True, f"config file {config}"), dest
    # ... and a switch nobody set keeps the table's default, with the default as its source.
    assert (args.use_deepspeed, src["use_deepspeed"]) == (False, "default")
    assert (args.dry_run, src["dry_run"]) == (False, "default")
    given = resolve_launch_args(_args("--config_file", str(config), "--quiet", "t.py"))
    assert (given.args.quiet, given.sources["quiet"]) == (True, "command line")


def test_accelerate_default_values_of_refused_and_plugin_flags_pass() -> None:
    args = _args("t.py")
    for dest, value in (("use_megatron_lm", False), ("megatron_lm_tp_degree", 1),
                        ("megatron_lm_pp_degree", 1), ("megatron_lm_gradient_clipping", 1.0),
                        ("fsdp_offload_params", False), ("fsdp_min_num_params", 0),
                        ("zero_stage", 0)):
        setattr(args, dest, value)
    resolved = resolve_launch_args(args)  # Accelerate's namespace defaults: nothing refused
    assert resolved.args.use_fsdp is False and resolved.args.fsdp_offload_params is False
    for dest, value, message in (
            ("megatron_lm_tp_degree", 2, "--megatron_lm_tp_degree is not supported"),
            ("megatron_lm_gradient_clipping", 0.5, "--megatron_lm_gradient_clipping is not"),
            ("use_megatron_lm", True, "--use_megatron_lm is not supported"),
            ("fsdp_offload_params", True, "--fsdp_offload_params only applies with --use_fsdp"),
            ("fsdp_min_num_params", 100, "--fsdp_min_num_params only applies with --use_fsdp")):
        args = _args("t.py")
        setattr(args, dest, value)
        with pytest.raises(ConfigurationError, match=message):
            resolve_launch_args(args)


def test_conflicting_sources_name_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        _plan("--config_file", str(CONFIGS / "accelerate_1_x_fsdp.yaml"), "--use_deepspeed",
              "t.py")
    assert "DeepSpeed (from command line) and FSDP (from config file" in str(err.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--fsdp_offload_params", "maybe"], "--fsdp_offload_params expects true or false, got "
     "'maybe'"),
    (["--zero_stage", "two"], "--zero_stage expects a whole number, got 'two'"),
    (["--dynamo_mode", "fast"], "invalid choice: 'fast'"),
    (["--dynamo_backend", "inductr"], "invalid choice: 'inductr'"),
    (["--fsdp_ofload_params", "true"], "unknown flag --fsdp_ofload_params (did you mean "
     "--fsdp_offload_params?)"),
])
def test_bad_values_and_unknown_flags(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["launch", *argv, "t.py"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_config_file_through_the_cli_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_procs: 2\n")
    assert main(["launch", "--config_file", str(bad), "t.py"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines()
           if "could not load the command" not in line]
    assert len(err) == 1, err
    assert err[0].startswith(f"accel launch: error: {bad}: unknown key 'num_procs' (did you "
                             "mean 'num_processes'?); valid: ")


def test_dynamo_backend_names_any_case_and_match_the_plugin(tmp_path: Path) -> None:
    assert _args("--dynamo_backend", "INDUCTOR", "t.py").dynamo_backend == "inductor"
    old = tmp_path / "old.yaml"  # Accelerate < 0.18: a top-level key, upper case
    old.write_text("dynamo_backend: INDUCTR\n")
    with pytest.raises(ConfigurationError, match="key 'dynamo_backend' has value 'INDUCTR' of "
                       "type str; expected one of no, eager"):
        resolve_launch_args(_args("--config_file", str(old), "t.py"))
    compile_mod = pytest.importorskip("accel_parallel.compile")
    from accel_launch.flags_plugins import DYNAMO_BACKENDS

    assert DYNAMO_BACKENDS == tuple(b.value.lower() for b in compile_mod.DynamoBackend)


def test_validate_launch_command_fills_from_the_config_and_defers_the_plugin_check(
        tmp_path: Path) -> None:
    """Accelerate's ``_validate_launch_command``: command line > config file, returns
    ``(args, config, mp_from_config_flag)``; a plugin flag without its plugin is left to the
    launch, which still refuses it."""
    from accel_launch.launch import _validate_launch_command

    config = tmp_path / "validate.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndebug: true\nnum_processes: 1\n"
                      "distributed_type: 'NO'\nmixed_precision: bf16\n"
                      "fsdp_config:\n  fsdp_sync_module_states: false\n"
                      "deepspeed_config:\n  deepspeed_config_file: path/to/be/ignored\n")
    args = _args("--num-processes", "2", "--deepspeed_config_file", "path/to/be/accepted",
                 "--config-file", str(config), "test.py")
    assert args.debug is False and args.fsdp_sync_module_states is True  # Accelerate's parser
    returned, defaults, mp_from_config = _validate_launch_command(args)
    assert returned is args and defaults.path == config and mp_from_config is True
    assert args.debug is True and args.num_processes == 2
    assert args.fsdp_sync_module_states is False  # the config's, no FSDP flag given
    assert args.deepspeed_config_file == "path/to/be/accepted"  # the command line wins
    with pytest.raises(ConfigurationError, match="--deepspeed_config_file only applies with "
                                                 "--use_deepspeed"):
        resolve_launch_args(args)  # what `accel launch` runs first
    plain = _args("--mixed_precision", "fp16", "--config_file", str(config), "test.py")
    assert _validate_launch_command(plain)[2] is False  # given on the command line
    bare = _args("test.py")
    assert _validate_launch_command(bare)[1:] == (None, False)  # no config file anywhere
    assert bare.num_machines == 1 and bare.machine_rank == 0  # defaults filled
    assert bare.fsdp_sync_module_states is None  # the parser's True asked for nothing
    with pytest.raises(ConfigurationError, match="--num_processes"):
        _validate_launch_command(_args("--num_processes", "0", "test.py"))

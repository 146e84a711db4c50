"""build_launch_plan / validate_launch_args: flags -> LaunchConfig fields and worker env."""

from __future__ import annotations

import argparse

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import (
    DEFAULT_SHUTDOWN_TIMEOUT,
    HostInfo,
    build_launch_plan,
    parse_rdzv_conf,
    validate_launch_args,
)
from accel_state.errors import ConfigurationError

CPU_BOX = HostInfo(cpu_count=8, cuda_device_count=0, python="/py")
GPU_BOX = HostInfo(cpu_count=32, cuda_device_count=4, python="/py")


def _args(*argv: str) -> argparse.Namespace:
    return launch_command_parser().parse_args(list(argv))


def test_cpu_two_processes_really_means_two_workers() -> None:
    plan = build_launch_plan(_args("--cpu", "--num_processes", "2", "t.py", "--foo", "bar"),
                             CPU_BOX, 4242)
    assert plan.config["nproc_per_node"] == 2
    assert plan.config["min_nodes"] == plan.config["max_nodes"] == 1
    assert plan.env["ACCEL_USE_CPU"] == plan.env["ACCELERATE_USE_CPU"] == "true"
    assert plan.env["ACCEL_LAUNCHED"] == "1"
    assert plan.command == ["/py", "-u", "t.py", "--foo", "bar"]


def test_static_rendezvous_on_the_given_port() -> None:
    plan = build_launch_plan(_args("--cpu", "t.py"), CPU_BOX, 4242)
    assert plan.config["rdzv_backend"] == "static"
    assert plan.config["rdzv_endpoint"] == "127.0.0.1:4242"
    assert plan.config["rdzv_configs"] == {"rank": 0}
    assert plan.config["monitor_interval"] == 0.1
    assert plan.config["max_restarts"] == 0
    assert plan.config["shutdown_timeout"] == DEFAULT_SHUTDOWN_TIMEOUT


def test_environment_contract() -> None:
    plan = build_launch_plan(_args("--mixed_precision", "bf16", "--debug", "t.py"), CPU_BOX, 1)
    assert plan.env == {"ACCEL_LAUNCHED": "1", "ACCEL_MIXED_PRECISION": "bf16",
                        "ACCELERATE_MIXED_PRECISION": "bf16", "ACCEL_DEBUG_MODE": "true",
                        "ACCELERATE_DEBUG_MODE": "true", "OMP_NUM_THREADS": "8"}


def test_omp_threads_default_explicit_and_inherited() -> None:
    four = build_launch_plan(_args("--cpu", "--num_processes", "3", "t.py"), CPU_BOX, 1)
    assert four.env["OMP_NUM_THREADS"] == "2"  # 8 cores // 3 processes
    many = build_launch_plan(_args("--cpu", "--num_processes", "16", "t.py"), CPU_BOX, 1)
    assert many.env["OMP_NUM_THREADS"] == "1"
    explicit = build_launch_plan(
        _args("--num_cpu_threads_per_process", "5", "t.py"),
        HostInfo(cpu_count=8, omp_num_threads_set=True), 1)
    assert explicit.env["OMP_NUM_THREADS"] == "5"
    inherited = build_launch_plan(_args("t.py"), HostInfo(cpu_count=8, omp_num_threads_set=True), 1)
    assert "OMP_NUM_THREADS" not in inherited.env


def test_default_process_count_follows_cuda_devices() -> None:
    assert build_launch_plan(_args("t.py"), GPU_BOX, 1).config["nproc_per_node"] == 4
    assert build_launch_plan(_args("--cpu", "t.py"), GPU_BOX, 1).config["nproc_per_node"] == 1
    assert build_launch_plan(_args("t.py"), CPU_BOX, 1).config["nproc_per_node"] == 1


def test_multi_machine_num_processes_is_the_total() -> None:
    plan = build_launch_plan(
        _args("--num_machines", "2", "--machine_rank", "1", "--num_processes", "8",
              "--main_process_ip", "10.0.0.1", "--main_process_port", "29400", "t.py"),
        GPU_BOX, 29400)
    assert plan.config["nproc_per_node"] == 4
    assert plan.config["min_nodes"] == plan.config["max_nodes"] == 2
    assert plan.config["rdzv_endpoint"] == "10.0.0.1:29400"
    assert plan.config["rdzv_configs"]["rank"] == 1
    assert plan.env["OMP_NUM_THREADS"] == "8"


def test_ipv6_endpoint_is_bracketed() -> None:
    plan = build_launch_plan(_args("--main_process_ip", "::1", "t.py"), CPU_BOX, 99)
    assert plan.config["rdzv_endpoint"] == "[::1]:99"


def test_module_and_no_python_commands() -> None:
    assert build_launch_plan(_args("-m", "pkg.train", "--x"), CPU_BOX, 1).command == [
        "/py", "-u", "-m", "pkg.train", "--x"]
    assert build_launch_plan(_args("--no_python", "./run.sh", "a"), CPU_BOX, 1).command == [
        "./run.sh", "a"]


def test_torchrun_passthrough_flags() -> None:
    plan = build_launch_plan(
        _args("--max_restarts", "2", "--monitor_interval", "0.5", "--rdzv_backend", "c10d",
              "--rdzv_conf", "timeout=60, read_timeout=30", "--log_dir", "/tmp/l", "-t", "3",
              "--role", "trainer", "t.py"),
        CPU_BOX, 7)
    assert plan.config["max_restarts"] == 2 and plan.config["monitor_interval"] == 0.5
    assert plan.config["rdzv_backend"] == "c10d"
    assert plan.config["rdzv_configs"] == {"timeout": "60", "read_timeout": "30"}
    assert (plan.log_dir, plan.tee, plan.config["role"]) == ("/tmp/l", "3", "trainer")


def test_shutdown_timeout_left_to_torch_when_set_in_env() -> None:
    host = HostInfo(cpu_count=2, shutdown_timeout_set=True)
    assert build_launch_plan(_args("t.py"), host, 1).config["shutdown_timeout"] is None


def test_multi_gpu_without_cuda_warns() -> None:
    plan = build_launch_plan(_args("--multi_gpu", "--num_processes", "2", "t.py"), CPU_BOX, 1)
    assert any("--multi_gpu" in w and "--cpu" in w for w in plan.warnings)
    assert build_launch_plan(_args("--cpu", "t.py"), CPU_BOX, 1).warnings == ()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--num_processes", "0"], "--num_processes 0"),
    (["--num_processes", "-2"], "--num_processes -2"),
    (["--num_machines", "2", "--machine_rank", "2", "--main_process_ip", "h",
      "--main_process_port", "5"], "--machine_rank 2"),
    (["--machine_rank", "-1"], "--machine_rank -1"),
    (["--num_machines", "2", "--main_process_port", "5"], "--main_process_ip"),
    (["--num_machines", "2", "--main_process_ip", "h"], "--main_process_port"),
    (["--main_process_port", "70000"], "--main_process_port 70000"),
    (["--num_machines", "2", "--num_processes", "3", "--main_process_ip", "h",
      "--main_process_port", "5"], "multiple of"),
    (["--num_cpu_threads_per_process", "0"], "--num_cpu_threads_per_process 0"),
    (["-m", "--no_python"], "--module and --no_python"),
    (["--max_restarts", "-1"], "--max_restarts -1"),
    (["--monitor_interval", "0"], "--monitor_interval 0"),
    (["--tee", "9"], "--tee '9'"),
    (["--rdzv_conf", "timeout"], "--rdzv_conf 'timeout'"),
])
def test_invalid_flags_are_configuration_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(ConfigurationError) as exc:
        validate_launch_args(_args(*argv, "t.py"))
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_parse_rdzv_conf() -> None:
    assert parse_rdzv_conf("") == {}
    assert parse_rdzv_conf("a=1,b=x=y") == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigurationError, match="key=value"):
        parse_rdzv_conf("a=")


def test_launch_config_drops_fields_an_older_torch_does_not_have():
    """torch 2.11's LaunchConfig has no shutdown_timeout (seen on a GPU machine): the launch
    must still start there; unknown keys that are not known-newer still reach torch."""
    import dataclasses

    from accel_launch.elastic import supported_config

    @dataclasses.dataclass
    class OldLaunchConfig:
        min_nodes: int
        max_nodes: int

    config = {"min_nodes": 1, "max_nodes": 1, "shutdown_timeout": 5}
    assert supported_config(config, OldLaunchConfig) == {"min_nodes": 1, "max_nodes": 1}
    from torch.distributed.launcher.api import LaunchConfig

    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        assert supported_config(config, LaunchConfig) == config
    assert supported_config({**config, "typo": 1}, OldLaunchConfig)["typo"] == 1


# -- accel's own --strategy / --strategy_config (strategy: / strategy_config: keys) ------------
class _Registered:
    """A registered strategy as the launcher sees it: only its ``validate_options``."""

    def __init__(self, **types: type) -> None:
        self.types = types

    def validate_options(self, options, source, registered_as=None):
        for key, value in options.items():
            if key not in self.types:
                raise ConfigurationError(f"{source} gives option(s) {key!r}, which strategy "
                                         f"{registered_as!r} does not take")
            if not isinstance(value, self.types[key]):
                raise ConfigurationError(f"{source} gives {key}={value!r} for strategy "
                                         f"{registered_as!r}, but it expects "
                                         f"{self.types[key].__name__}")
        return dict(options)


@pytest.fixture
def strategies(monkeypatch):
    """``demo`` and ``zero2`` registered where the launcher looks strategies up."""
    from accel_launch import strategy_check

    monkeypatch.setitem(strategy_check.REGISTERED, "demo", _Registered(level=int, tag=str))
    monkeypatch.setitem(strategy_check.REGISTERED, "zero2", _Registered(level=int))


def test_a_config_files_strategy_and_options_reach_the_workers(tmp_path, strategies) -> None:
    import json

    config = tmp_path / "strategy.yaml"
    config.write_text("use_cpu: true\nstrategy: demo\nstrategy_config:\n  level: 2\n"
                      "  tag: blue\n")
    plan = build_launch_plan(_args("--config_file", str(config), "t.py"), CPU_BOX, 1)
    assert plan.env["ACCEL_STRATEGY"] == "demo"
    assert json.loads(plan.env["ACCEL_STRATEGY_CONFIG"]) == {"level": 2, "tag": "blue"}
    # the command line wins over the file, as for every flag
    plan = build_launch_plan(_args("--config_file", str(config), "--strategy", "zero2",
                                   "--strategy_config", '{"level": 3}', "t.py"), CPU_BOX, 1)
    assert plan.env["ACCEL_STRATEGY"] == "zero2"
    assert plan.env["ACCEL_STRATEGY_CONFIG"] == '{"level": 3}'
    plain = build_launch_plan(_args("--cpu", "t.py"), CPU_BOX, 1)
    assert "ACCEL_STRATEGY" not in plain.env and "ACCEL_STRATEGY_CONFIG" not in plain.env


def test_a_wrong_name_or_option_is_refused_before_any_worker(tmp_path, strategies) -> None:
    with pytest.raises(ConfigurationError, match=r"^--strategy 'dmeo' \(from command line\): "
                                                 r"Unknown strategy 'dmeo'\. Did you mean "
                                                 r"'demo'\? Available: .*demo"):
        build_launch_plan(_args("--cpu", "--strategy", "dmeo", "t.py"), CPU_BOX, 1)
    config = tmp_path / "typed.yaml"
    config.write_text("strategy: demo\nstrategy_config:\n  level: high\n")
    with pytest.raises(ConfigurationError, match=rf"^--strategy_config \(from config file "
                                                 rf"{config}\) gives level='high' for strategy "
                                                 r"'demo', but it expects int$"):
        build_launch_plan(_args("--config_file", str(config), "t.py"), CPU_BOX, 1)
    with pytest.raises(ConfigurationError, match=r"gives option\(s\) 'levle', which strategy "
                                                 r"'demo' does not take"):
        build_launch_plan(_args("--cpu", "--strategy", "demo", "--strategy_config",
                                '{"levle": 1}', "t.py"), CPU_BOX, 1)


def test_strategy_options_without_a_name_or_not_a_mapping_are_refused(tmp_path, capsys,
                                                                       strategies) -> None:
    with pytest.raises(ConfigurationError, match=r"--strategy_config \(from command line\) "
                                                 r"gives options but no strategy is named"):
        build_launch_plan(_args("--cpu", "--strategy_config", '{"level": 3}', "t.py"),
                          CPU_BOX, 1)
    config = tmp_path / "bad.yaml"
    config.write_text("strategy: demo\nstrategy_config: 3\n")
    with pytest.raises(ConfigurationError, match=r"key 'strategy_config' has value 3 of type "
                                                 r"int; expected a mapping of option: value"):
        build_launch_plan(_args("--config_file", str(config), "t.py"), CPU_BOX, 1)
    with pytest.raises(SystemExit):
        _args("--strategy", "demo", "--strategy_config", "[1, 2]", "t.py")
    assert "--strategy_config expects a JSON object" in capsys.readouterr().err

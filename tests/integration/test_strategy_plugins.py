"""Strategies from another package (tests/plugins), registered through the
``accel.strategies`` entry point, drive the unchanged facade."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from accel import Accelerator
from accel_parallel import STRATEGIES
from accel_state import ConfigurationError

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


@pytest.fixture
def plugins(monkeypatch):
    """tests/plugins on sys.path: its dist-info registers the test strategies."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    STRATEGIES._clear()
    yield
    STRATEGIES._clear()


def test_entry_point_strategy_is_found_by_name(plugins, monkeypatch):
    assert "test-engine" in STRATEGIES.names()
    monkeypatch.setenv("ACCEL_STRATEGY", "test-engine")
    accelerator = Accelerator(cpu=True)
    assert type(accelerator.strategy).__name__ == "EngineStrategy"
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigurationError, match="one model and its optimizer"):
        accelerator.prepare(model)  # an engine initialises model and optimizer together
    engine, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(engine(torch.ones(2, 3)).sum())
    optimizer.step()
    optimizer.zero_grad()
    assert (engine.backward_calls, engine.steps) == (1, 1)
    assert accelerator.unwrap_model(engine) is model


def test_unknown_requested_strategy_lists_the_registered_ones(plugins, monkeypatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "test-engin")
    with pytest.raises(ConfigurationError, match="Did you mean 'test-engine'.*ddp"):
        Accelerator(cpu=True)


@pytest.mark.multiprocess
@pytest.mark.shared_launch("strategy_plugins.py", "{out}")
def test_engine_and_topology_strategies_in_two_processes(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for marker in ("ENGINE-OK", "TOPOLOGY-OK"):
        for rank in (0, 1):
            assert f"{marker} rank={rank}" in proc.stdout, explain(proc)


# -- test-logged-ddp: a third-party strategy with typed options (issue 40) --------------------
def _refused_in_one_process(route: str) -> str:
    return (rf"^Strategy 'test-logged-ddp' \({route}\) cannot run here: DistributedDataParallel "
            r"needs a process group, and this run of 1 process\(es\) has none\. Fix: start "
            r"several processes with `accel launch --num_processes N`")


def test_named_where_its_check_fails_on_every_route(plugins, monkeypatch, tmp_path):
    """One process has no process group: every route gives the one named error (it was
    torch's "Default process group has not been initialized" at the first prepare)."""
    from accel_state import PartialState
    from accel_test_logged import LoggedDDPKwargs, LoggedDDPStrategy

    by_data = _refused_in_one_process(r"chosen by the configuration, priority 70")
    with pytest.raises(ConfigurationError, match=by_data):
        Accelerator(cpu=True, kwargs_handlers=[LoggedDDPKwargs()])
    with pytest.raises(ConfigurationError, match=_refused_in_one_process(
            r"named by Accelerator\(strategy=\.\.\.\)")):
        Accelerator(cpu=True, strategy="test-logged-ddp")
    with pytest.raises(ConfigurationError, match=_refused_in_one_process(
            r"given as a Strategy instance")):
        Accelerator(cpu=True, strategy=LoggedDDPStrategy(PartialState(cpu=True)))
    # --strategy and a config file's strategy: reach the workers as ACCEL_STRATEGY
    config = tmp_path / "launch.yaml"
    config.write_text("use_cpu: true\nstrategy: test-logged-ddp\nstrategy_config:\n"
                      "  label: from-the-file\n")
    for flags in ([], ["--strategy", "test-logged-loud"]):
        for key, value in _worker_env(config, *flags).items():
            monkeypatch.setenv(key, value)
        with pytest.raises(ConfigurationError, match=_refused_in_one_process(
                r"named by ACCEL_STRATEGY \(accel launch --strategy, a config file's "
                r"strategy:\)")):
            Accelerator(cpu=True)


def _worker_env(config: Path, *flags: str) -> dict[str, str]:
    """The ACCEL_* variables `accel launch --config_file CONFIG FLAGS` gives its workers."""
    from accel_launch.launch import launch_command_parser
    from accel_launch.launch_plan import HostInfo, build_launch_plan

    args = launch_command_parser().parse_args(["--config_file", str(config), *flags, "t.py"])
    plan = build_launch_plan(args, HostInfo(cpu_count=2, python="/py"), 1)
    return {k: v for k, v in plan.env.items() if k.startswith("ACCEL_STRATEGY")}


def test_typed_options_without_the_launcher(plugins, monkeypatch):
    """A script started without `accel launch` gets the same check in Accelerator()."""
    monkeypatch.setenv("ACCEL_STRATEGY", "test-logged-ddp")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", '{"reduction": "median"}')
    with pytest.raises(ConfigurationError, match=r"^ACCEL_STRATEGY_CONFIG \(.*\) gives "
                                                 r"reduction='median' for strategy "
                                                 r"'test-logged-ddp', but LoggedDDPKwargs\."
                                                 r"reduction expects one of 'mean', 'sum': "
                                                 r"fix the value\.$"):
        Accelerator(cpu=True)


@pytest.mark.parametrize(("flags", "expected"), [
    (["--strategy", "test-logged-ddp", "--strategy_config", '{"log_every": "often"}'],
     "accel launch: error: --strategy_config (from command line) gives log_every='often' for "
     "strategy 'test-logged-ddp', but LoggedDDPKwargs.log_every expects an integer: fix the "
     "value."),
    (["--config_file", "{config}"],
     "accel launch: error: preset 'test-logged-loud' with --strategy_config (from config "
     "file {config}) gives stream='stdin' for strategy 'test-logged-ddp', but "
     "LoggedDDPKwargs.stream expects one of 'stdout', 'stderr': fix the value."),
    (["--strategy", "test-loged-ddp"],
     "accel launch: error: --strategy 'test-loged-ddp' (from command line): Unknown strategy "
     "'test-loged-ddp'. Did you mean 'test-logged-ddp'?"),
])
def test_a_wrong_option_is_refused_before_any_worker_starts(flags, expected, launch, explain,
                                                             monkeypatch, tmp_path):
    """The launcher loads the strategy's entry point and checks the options itself: one line,
    exit 2, and the script never ran (it would leave a file behind)."""
    config = tmp_path / "launch.yaml"
    config.write_text("strategy: test-logged-loud\nstrategy_config:\n  stream: stdin\n")
    marker = tmp_path / "a-worker-ran"
    script = tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = launch("--cpu", "--num_processes", "2",
                  *(flag.replace("{config}", str(config)) for flag in flags), str(script),
                  timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, explain(proc)
    assert lines and lines[-1].startswith(expected.replace("{config}", str(config))), \
        explain(proc)
    assert len([line for line in lines if line.startswith("accel launch: error")]) == 1
    assert not any("Traceback" in line for line in lines), explain(proc)
    assert not marker.exists()  # no worker started


@pytest.mark.multiprocess
@pytest.mark.shared_launch("strategy_routes.py", env={
    "ACCEL_STRATEGY": "test-logged-ddp",
    "ACCEL_STRATEGY_CONFIG": '{"log_every": 2, "reduction": "sum", "label": "from-config"}'})
def test_every_route_selects_it_in_two_processes(explain, shared_launch):
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"ROUTES-OK rank={rank}" in proc.stdout, explain(proc)
    assert "logged-ddp: all-reduce 1" in proc.stdout, explain(proc)

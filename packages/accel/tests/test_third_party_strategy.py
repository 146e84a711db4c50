"""A strategy from another package (its own entry point and option) is chosen and configured
through Accelerate's own API, ``kwargs_handlers=[...]``, or through a config file that
`accel launch` turns into the workers' ``ACCEL_STRATEGY`` / ``ACCEL_STRATEGY_CONFIG``: no
variable set by the user, no facade code (issue 26). A preset of its own registers beside
it."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest
import torch
from accel_parallel import STRATEGIES
from accel_state import ConfigurationError

from accel import Accelerator

_PACKAGE = '''
from dataclasses import dataclass

from accel_parallel import Strategy, StrategyPreset
from accel_state import KwargsHandler


@dataclass
class DemoKwargs(KwargsHandler):
    level: int = 1
    tag: str = "plain"


LOUD = StrategyPreset("demo", {"level": 9}, "the demo strategy at its loudest")


class DemoStrategy(Strategy):
    name = "demo"
    priority = 90
    handler_kinds = {"demo": DemoKwargs}

    @classmethod
    def accepts(cls, config):
        return "demo" in config.handlers

    @classmethod
    def from_config(cls, config):
        strategy = cls(config.state, precision=config.precision)
        handler = config.handlers.get("demo", DemoKwargs())
        strategy.level, strategy.tag = handler.level, handler.tag
        return strategy
'''


@pytest.fixture
def demo_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``demo_strategy``, installed the way pip would: a module and a dist-info folder whose
    entry point registers it in the ``accel.strategies`` group."""
    (tmp_path / "demo_strategy.py").write_text(textwrap.dedent(_PACKAGE))
    info = tmp_path / "demo_strategy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-strategy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[accel.strategies]\ndemo = demo_strategy:DemoStrategy\n"
        "demo-loud = demo_strategy:LOUD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    STRATEGIES._clear()
    yield importlib.import_module("demo_strategy")
    STRATEGIES._clear()


def test_its_handler_selects_and_configures_it(demo_package) -> None:
    accelerator = Accelerator(cpu=True, kwargs_handlers=[demo_package.DemoKwargs(level=3)])
    assert type(accelerator._strategy).__name__ == "DemoStrategy"
    assert accelerator._strategy.level == 3
    model, optimizer = accelerator.prepare(torch.nn.Linear(4, 2),
                                           torch.optim.SGD(torch.nn.Linear(4, 2).parameters()))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    accelerator.backward(model(torch.ones(3, 4)).sum())
    optimizer.step()
    assert not torch.equal(model.weight, before)
    assert type(Accelerator(cpu=True)._strategy).__name__ == "SingleDeviceStrategy"


def test_its_handler_once_only_and_unknown_handlers_list_it(demo_package) -> None:
    with pytest.raises(ConfigurationError, match="more than one DemoKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[demo_package.DemoKwargs(),
                                               demo_package.DemoKwargs()])
    with pytest.raises(ConfigurationError, match="unsupported object.*DemoKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[object()])


def test_a_ready_strategy_instance_stands_where_accelerate_takes_a_plugin() -> None:
    """``Accelerator(fsdp_plugin=<a Strategy>)`` (or ``deepspeed_plugin=``,
    ``torch_tp_plugin=``) runs that very object; with another parallelism argument it is
    refused naming both."""
    from accel_parallel import SingleDeviceStrategy
    from accel_state import PartialState

    class Counting(SingleDeviceStrategy):
        name = "counting"
        backwards = 0

        def backward(self, loss, **kwargs):
            self.backwards += 1
            super().backward(loss, **kwargs)

    ready = Counting(PartialState(cpu=True))
    accelerator = Accelerator(cpu=True, torch_tp_plugin=ready)
    assert accelerator.strategy is ready
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    accelerator.backward(model(torch.ones(1, 2)).sum())
    assert ready.backwards == 1
    with pytest.raises(ConfigurationError, match=r"fsdp_plugin=<Counting>\) is a ready "
                                                 r"strategy.*parallelism_config was given"):
        from accel import ParallelismConfig

        Accelerator(cpu=True, fsdp_plugin=ready, parallelism_config=ParallelismConfig())


# -- chosen and configured by a config file, through the launcher (no variable by hand) -----
def _worker_env(config_text: str, tmp_path: Path, *flags: str) -> dict[str, str]:
    """The environment `accel launch --config_file` computes for its workers (no launch)."""
    from accel_launch.launch import launch_command_parser
    from accel_launch.launch_plan import HostInfo, build_launch_plan

    config = tmp_path / "launch.yaml"
    config.write_text(textwrap.dedent(config_text))
    args = launch_command_parser().parse_args(["--config_file", str(config), *flags, "t.py"])
    plan = build_launch_plan(args, HostInfo(cpu_count=2, python="/py"), 1)
    return {k: v for k, v in plan.env.items() if k.startswith("ACCEL")}


def test_a_config_file_chooses_and_configures_it(demo_package, tmp_path, monkeypatch) -> None:
    workers = _worker_env("""
        use_cpu: true
        strategy: demo
        strategy_config:
          level: 2
          tag: from-the-file
        """, tmp_path)
    assert workers["ACCEL_STRATEGY"] == "demo"
    for key, value in workers.items():  # what every worker starts with
        monkeypatch.setenv(key, value)
    accelerator = Accelerator(cpu=True)
    assert type(accelerator.strategy).__name__ == "DemoStrategy"
    assert (accelerator.strategy.level, accelerator.strategy.tag) == (2, "from-the-file")
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    accelerator.backward(model(torch.ones(3, 4)).sum())
    assert model.weight.grad is not None


def test_its_preset_and_the_code_winning_over_the_file(demo_package, monkeypatch) -> None:
    monkeypatch.setenv("ACCEL_STRATEGY", "demo-loud")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", '{"tag": "extra"}')
    assert "demo-loud" in STRATEGIES.names()
    loud = Accelerator(cpu=True).strategy
    assert (type(loud).__name__, loud.level, loud.tag) == ("DemoStrategy", 9, "extra")
    monkeypatch.setenv("ACCEL_STRATEGY", "demo")
    with pytest.warns(UserWarning, match=r"gives options for DemoKwargs, but the code passed "
                                         r"one.*the code's is used"):
        coded = Accelerator(cpu=True, kwargs_handlers=[demo_package.DemoKwargs(level=5)])
    assert (coded.strategy.level, coded.strategy.tag) == (5, "plain")


@pytest.mark.parametrize(("variables", "message"), [
    ({"ACCEL_STRATEGY": "demo", "ACCEL_STRATEGY_CONFIG": '{"levle": 2}'},
     r"ACCEL_STRATEGY_CONFIG \(accel launch --strategy_config, a config file's "
     r"strategy_config:\) gives option\(s\) 'levle', which strategy 'demo' \(DemoKwargs\) "
     r"does not take; its options: level, tag"),
    ({"ACCEL_STRATEGY": "dmeo"},
     r"Unknown strategy 'dmeo'\. Did you mean 'demo'\? Available: .*demo, demo-loud, .*zero3"),
    ({"ACCEL_STRATEGY": "demo-loud", "ACCEL_STRATEGY_CONFIG": '{"level": 1}'},
     r"Preset 'demo-loud' fixes level=9, but ACCEL_STRATEGY_CONFIG .* sets level=1: drop it, "
     r"or name the strategy 'demo'"),
    ({"ACCEL_STRATEGY_CONFIG": '{"level": 2}'},
     r"gives strategy options \['level'\], but no strategy is named: name the one they are "
     r"for \(ACCEL_STRATEGY=<name>"),
    ({"ACCEL_STRATEGY": "single", "ACCEL_STRATEGY_CONFIG": '{"level": 2}'},
     r"strategy 'single' takes none \(it declares no options_class or handler_kinds\)"),
    ({"ACCEL_STRATEGY": "demo", "ACCEL_STRATEGY_CONFIG": "level=2"},
     r"ACCEL_STRATEGY_CONFIG='level=2' is not valid JSON"),
    ({"ACCEL_STRATEGY": "demo", "ACCEL_STRATEGY_CONFIG": "[2]"},
     r"must be a JSON object of the strategy's options .* not a list"),
])
def test_options_by_data_are_refused_clearly(demo_package, monkeypatch, variables,
                                             message) -> None:
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=message):
        Accelerator(cpu=True)

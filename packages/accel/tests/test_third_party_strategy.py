"""A strategy from another package (its own entry point and option) is chosen and configured
through Accelerate's own API, ``kwargs_handlers=[...]``: no environment variable, no facade
code (issue 26)."""

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

from accel_parallel import Strategy
from accel_state import KwargsHandler


@dataclass
class DemoKwargs(KwargsHandler):
    level: int = 1


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
        strategy.level = config.handlers["demo"].level
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
        "[accel.strategies]\ndemo = demo_strategy:DemoStrategy\n")
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

"""Strategies from another package (tests/plugins), registered through the
``accel.strategies`` entry point, drive the unchanged facade."""

from __future__ import annotations

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

"""``Accelerator(strategy=...)`` (accel only): a registered name or a Strategy instance, as
``accel launch --strategy`` names one, checked as every route is (issue 40.4)."""

from __future__ import annotations

import pytest
import torch
from accel import Accelerator
from accel_parallel import SingleDeviceStrategy
from accel_state import ConfigurationError, PartialState


def test_a_registered_name_builds_that_strategy() -> None:
    accelerator = Accelerator(cpu=True, strategy="single")
    assert type(accelerator.strategy) is SingleDeviceStrategy
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    accelerator.backward(model(torch.ones(1, 2)).sum())
    assert model.weight.grad is not None


def test_an_unknown_name_lists_the_registered_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"Unknown strategy 'fsdp3'\. Did you mean "
                                                 r"'fsdp'\? Available: .*ddp, deepspeed, fsdp, "
                                                 r"nd, pipeline, single.*zero3"):
        Accelerator(cpu=True, strategy="fsdp3")


def test_a_name_that_cannot_run_here_is_refused_naming_the_argument() -> None:
    with pytest.raises(ConfigurationError, match=r"^Strategy 'ddp' \(named by Accelerator\("
                                                 r"strategy=\.\.\.\)\) cannot run here: "
                                                 r"DistributedDataParallel needs a process group"):
        Accelerator(cpu=True, strategy="ddp")


def test_an_instance_is_used_as_it_is() -> None:
    ready = SingleDeviceStrategy(PartialState(cpu=True))
    assert Accelerator(cpu=True, strategy=ready).strategy is ready
    with pytest.raises(ConfigurationError, match=r"pass the strategy once, as strategy="):
        Accelerator(cpu=True, strategy=ready, fsdp_plugin=ready)


def test_anything_else_and_a_positional_use_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"strategy=3\) takes a registered strategy "
                                                 r"name .* or a Strategy instance, not a int"):
        Accelerator(cpu=True, strategy=3)
    with pytest.raises(TypeError):  # keyword only: Accelerate's positional order is unchanged
        Accelerator(True, None, None, 1, True, None, None, None, None, None, None, None, None,
                    None, None, True, None, None, None, None, None, "single")


def test_the_code_and_the_launcher_must_agree(monkeypatch) -> None:
    monkeypatch.setenv("ACCEL_STRATEGY", "ddp")
    with pytest.raises(ConfigurationError, match=r"Accelerator\(strategy=\.\.\.\) names "
                                                 r"strategy 'single', but named by "
                                                 r"ACCEL_STRATEGY .* names 'ddp'"):
        Accelerator(cpu=True, strategy="single")

"""Gradient accumulation: accumulate(), loss scaling, step skipping, dataloader-end sync."""

from __future__ import annotations

import pytest
import torch
from accel_state import ConfigurationError, GradientAccumulationPlugin
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator


def _train(accelerator: Accelerator, batch_size: int, n: int = 24, epochs: int = 2):
    torch.manual_seed(0)
    x, y = torch.randn(n, 5), torch.randn(n, 1)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for _ in range(epochs):
        for xb, yb in loader:
            with accelerator.accumulate(model):  # Accelerate's documented order
                accelerator.backward(nn.functional.mse_loss(model(xb), yb))
                optimizer.step()
                optimizer.zero_grad()
                syncs.append(accelerator.sync_gradients)
    return model, syncs


def test_accumulating_four_batches_equals_one_batch_four_times_larger():
    big, big_syncs = _train(Accelerator(cpu=True), batch_size=8)
    small, small_syncs = _train(Accelerator(cpu=True, gradient_accumulation_steps=4), batch_size=2)
    assert all(big_syncs) and small_syncs == ([False, False, False, True] * 3) * 2
    for p, q in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_last_batch_of_the_dataloader_always_syncs():
    # 5 batches per epoch with accumulation 2: the 5th batch is an incomplete cycle but steps
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    _, syncs = _train(accelerator, batch_size=5, n=25, epochs=1)
    assert syncs == [False, True, False, True, True]


def test_plugin_options_and_settable_steps():
    plugin = GradientAccumulationPlugin(num_steps=3, sync_with_dataloader=False)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_accumulation_steps == 3
    _, syncs = _train(accelerator, batch_size=5, n=25, epochs=1)
    assert syncs == [False, False, True, False, False]  # no forced sync at the dataloader end
    accelerator.gradient_accumulation_steps = 1
    assert accelerator.gradient_accumulation_steps == 1


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_accumulation_settings_are_refused(bad):
    with pytest.raises(ConfigurationError, match="gradient_accumulation_steps"):
        Accelerator(cpu=True, gradient_accumulation_steps=bad)


def test_steps_and_plugin_together_are_refused():
    with pytest.raises(ConfigurationError, match="both"):
        Accelerator(cpu=True, gradient_accumulation_steps=2,
                    gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2))
    with pytest.raises(ConfigurationError, match="num_steps=None"):
        Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin())


def test_the_boundary_reaches_the_strategy_and_its_should_step_rules_the_wrappers(monkeypatch):
    """``accumulate()`` hands one MicroStep (sync, reduce, index, end of the loader) to the
    strategy's accumulation_context and backward; the prepared optimizer and scheduler step
    when the strategy's should_step says so, not by reading GradientState."""
    from accel_parallel import SingleDeviceStrategy

    seen: list[tuple] = []

    class EveryOther(SingleDeviceStrategy):  # steps on every second batch of a cycle of 4
        def accumulation_context(self, models, micro_step):
            seen.append((micro_step.sync, micro_step.reduce, micro_step.index,
                         micro_step.end_of_dataloader))
            return super().accumulation_context(models, micro_step)

        def backward(self, loss, *, accumulation_steps=1, micro_step=None, **kwargs):
            assert micro_step is accelerator.gradient_state.micro_step
            super().backward(loss, accumulation_steps=accumulation_steps, **kwargs)

        def should_step(self, micro_step):
            return micro_step.sync or micro_step.index % 2 == 0

    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(
        num_steps=4, sync_each_batch=True))
    monkeypatch.setattr(accelerator, "_strategy", EveryOther(accelerator.state))
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = DataLoader(TensorDataset(torch.ones(5, 2)), batch_size=1)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    steps = []
    for (x,) in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(x).sum())
            optimizer.step()
            scheduler.step()
            steps.append(scheduler.scheduler.last_epoch)
            optimizer.zero_grad()
    assert seen == [(False, True, 1, False), (False, True, 2, False), (False, True, 3, False),
                    (True, True, 4, False), (True, True, 0, True)]  # reduce: sync_each_batch
    assert steps == [0, 1, 1, 2, 3]  # batches 2 and 4 (index even) and the loader's last

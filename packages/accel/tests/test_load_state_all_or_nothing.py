"""``Accelerator.load_state`` that fails at any stage changes nothing: the model, optimizer
(state, step counts, param groups), scheduler, dataloader position, registered objects,
RNG states, ``accelerator.step`` and the checkpoint numbering are what they were before
the call, and the original error is raised."""

from __future__ import annotations

import random
from pathlib import Path

import accel_state.random
import numpy as np
import pytest
import torch
from accel import Accelerator
from accel_checkpoint.project import ProjectConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


class Counter:
    """A registered object; ``fail`` makes its next load write its state, then raise (a
    state that does not fit: putting its own state back works)."""

    def __init__(self) -> None:
        self.n, self.fail = 0, False

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]
        if self.fail:
            self.fail = False
            raise KeyError("counter refuses")


def _train(accelerator, model, optimizer, scheduler, loader, batches: int) -> None:
    for i, (x, y) in enumerate(loader):
        if i == batches:
            break
        loss = (model(x) - y).square().mean()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _setup(tmp_path):
    """A trained run saved (checkpoint_0), trained on and saved again: the state a failed
    load of checkpoint_0 must keep."""
    torch.manual_seed(0)
    random.seed(1)
    np.random.seed(2)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True))
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 0.01},
                                   {"params": list(model[1].parameters())
                                    + list(model[2].parameters()), "lr": 0.02}])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    _train(accelerator, model, optimizer, scheduler, loader, 3)
    counter.n = 3
    accelerator.step = 3
    accelerator.save_state()
    _train(accelerator, model, optimizer, scheduler, loader, 5)  # a new epoch, 5 batches in
    counter.n = 8
    accelerator.step = 8
    accelerator.save_state()  # checkpoint_1: the numbering goes on at 2
    torch.manual_seed(11)
    random.seed(12)
    np.random.seed(13)
    return accelerator, model, optimizer, scheduler, loader, counter


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _everything(accelerator, model, optimizer, scheduler, loader, counter) -> dict:
    return {"model": _plain(model.state_dict()), "optimizer": _plain(optimizer.state_dict()),
            "scheduler": _plain(scheduler.state_dict()), "loader": _plain(loader.state_dict()),
            "counter": counter.n, "step": accelerator.step,
            "iteration": accelerator.project_configuration.iteration,
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
            "numpy_rng": _plain(list(np.random.get_state()[1:]))}


def _assert_unchanged(before: dict, run) -> None:
    after = _everything(*run)
    for name, value in before.items():
        if name == "numpy_rng":
            assert all(np.array_equal(a, b) for a, b in zip(value, after[name], strict=True))
        else:
            assert _same(value, after[name]), f"{name} changed by the failed load"


def _inject(stage: str, run, monkeypatch) -> type[BaseException]:
    """Make ``stage`` fail after it (and the stages before it) wrote; the error type."""
    accelerator, model, optimizer, scheduler, loader, counter = run
    if stage == "custom object":
        counter.fail = True
        return KeyError
    if stage == "scheduler":
        inner = scheduler.scheduler

        def half_load(state):
            inner.__dict__.update(state)
            monkeypatch.undo()  # only the checkpoint's state does not fit
            raise ValueError("scheduler refuses")
        monkeypatch.setattr(inner, "load_state_dict", half_load)
        return ValueError
    if stage == "dataloader":
        def half_load(state, **kwargs):
            loader.set_epoch(99)
            monkeypatch.undo()
            raise ValueError("sampler state does not fit")
        monkeypatch.setattr(loader, "load_state_dict", half_load)
        return ValueError
    if stage == "rng":
        real = accel_state.random.restore_rng_state

        def half_restore(state):
            real(state)
            raise RuntimeError("bad RNG state")
        monkeypatch.setattr(accel_state.random, "restore_rng_state", half_restore)
        return RuntimeError
    if stage == "optimizer":
        optimizer.optimizer.register_load_state_dict_post_hook(_raise)
        return RuntimeError
    if stage == "model":
        model.register_load_state_dict_post_hook(lambda module, keys: _raise(module))
        return RuntimeError
    if stage == "load hook":  # a hook loads a model its own way; a later stage fails
        def hook(models, path):
            with torch.no_grad():
                for parameter in models[0].parameters():
                    parameter.fill_(7.0)
            models.pop(0)
        accelerator.register_load_state_pre_hook(hook)
        counter.fail = True
        return KeyError
    raise AssertionError(stage)


def _raise(_obj) -> None:
    raise RuntimeError("post-hook refuses")


STAGES = ["custom object", "scheduler", "dataloader", "rng", "optimizer", "model", "load hook"]


@pytest.mark.parametrize("stage", STAGES)
def test_load_state_failing_at_any_stage_changes_nothing(tmp_path, monkeypatch, stage):
    run = _setup(tmp_path)
    accelerator = run[0]
    error = _inject(stage, run, monkeypatch)
    before = _everything(*run)
    with pytest.raises(error):
        accelerator.load_state(str(tmp_path / "checkpoints" / "checkpoint_0"))
    _assert_unchanged(before, run)


def test_the_same_load_without_a_failure_changes_everything(tmp_path):
    """The check above is not vacuous: a good load does change every part."""
    run = _setup(tmp_path)
    before = _everything(*run)
    run[0].load_state(str(tmp_path / "checkpoints" / "checkpoint_0"))
    after = _everything(*run)
    changed = [name for name in before if name != "numpy_rng"
               and not _same(before[name], after[name])]
    assert changed == [n for n in before if n != "numpy_rng"]


class Fixture(Counter):
    """The fixture's registered object (its state: ``{"n": ...}``)."""


def test_an_accelerate_checkpoint_failing_late_changes_nothing():
    torch.manual_seed(3)
    accelerator = Accelerator(cpu=True)
    models = [nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)), nn.Linear(2, 2)]
    optimizers = [torch.optim.AdamW(models[0].parameters(), lr=0.01),
                  torch.optim.SGD(models[1].parameters(), lr=0.1, momentum=0.9)]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=1, gamma=0.5)
    prepared = accelerator.prepare(*models, *optimizers, scheduler)
    counter = Fixture()
    counter.fail = True
    accelerator.register_for_checkpointing(counter)
    prepared[0](torch.randn(2, 3)).sum().backward()
    prepared[2].step()
    before = [_plain(obj.state_dict()) for obj in prepared] + [torch.get_rng_state()]
    with pytest.raises(KeyError, match="counter refuses"):
        accelerator.load_state(str(FIXTURES / "safetensors"))
    after = [_plain(obj.state_dict()) for obj in prepared] + [torch.get_rng_state()]
    assert all(_same(a, b) for a, b in zip(before, after, strict=True))
    assert counter.n == 0 and accelerator.step == 0

"""A load that fails late changes nothing: whatever stage raises (a scheduler, a registered
object, the RNG states, an optimizer, a model's own loader, a writer's load), every object
it had already changed is put back exactly, and the original error goes on."""

from __future__ import annotations

import random

import accel_state.random
import pytest
import torch
from accel_checkpoint import load_checkpoint, save_checkpoint
from accel_checkpoint.applying import loads_certainly
from accel_checkpoint.dcp_writer import DCPWriter
from accel_checkpoint.per_rank import load_rank_state, save_rank_state
from accel_checkpoint.rollback import Rollback, all_or_nothing
from torch import nn


class Counter:
    """A registered object; ``fail`` makes its load change its state, then raise."""

    def __init__(self, fail: bool = False) -> None:
        self.n, self.fail = 0, fail

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]
        if self.fail:
            raise KeyError("counter refuses")


class HalfLoadingStepLR(torch.optim.lr_scheduler.StepLR):
    """A scheduler whose load writes its state, then raises (a state that does not fit)."""

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        raise ValueError("scheduler refuses")


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def _objects(seed: int, fail: str = ""):
    """Model + AdamW (step counts) + scheduler + counters, trained a few steps."""
    torch.manual_seed(seed)
    model = _model()
    optimizer = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 0.01},
                                   {"params": list(model[1].parameters())
                                    + list(model[2].parameters()), "lr": 0.02}])
    scheduler_type = HalfLoadingStepLR if fail == "scheduler" else torch.optim.lr_scheduler.StepLR
    scheduler = scheduler_type(optimizer, step_size=1, gamma=0.5)
    for _ in range(seed + 1):
        model(torch.randn(8, 4)).square().mean().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    counter = Counter()
    counter.n = seed + 10
    last = Counter(fail=fail == "counter")
    last.n = seed + 20
    return {"counter": counter, "scheduler": scheduler, "last": last, "optimizer": optimizer,
            "model": model}


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


def _everything(objects) -> dict:
    found = {name: _plain(obj.state_dict()) for name, obj in objects.items()}
    found["rng"] = (torch.get_rng_state(), random.getstate())
    return found


def _assert_unchanged(before, objects) -> None:
    after = _everything(objects)
    for name in before:
        if name == "rng":
            assert torch.equal(after["rng"][0], before["rng"][0]), "torch RNG changed"
            assert after["rng"][1] == before["rng"][1], "python RNG changed"
        else:
            assert _same(after[name], before[name]), f"{name} changed"


def _failing_stage(objects, stage: str, monkeypatch) -> type[BaseException]:
    """Make ``stage`` fail after it (and every stage before it) wrote; the error type."""
    if stage == "rng":
        real = accel_state.random.restore_rng_state

        def half_restore(state):
            real(state)  # every generator written, then refused
            raise RuntimeError("bad RNG state")
        monkeypatch.setattr(accel_state.random, "restore_rng_state", half_restore)
        return RuntimeError
    if stage == "optimizer":
        def refuse(optimizer):
            raise RuntimeError("optimizer post-hook refuses")
        objects["optimizer"].register_load_state_dict_post_hook(refuse)
        return RuntimeError
    if stage == "model":  # a model with a loader of its own: written, then raises
        def refuse(module, incompatible):
            raise RuntimeError("model post-hook refuses")
        objects["model"].register_load_state_dict_post_hook(refuse)
        return RuntimeError
    return {"scheduler": ValueError, "counter": KeyError}[stage]


@pytest.mark.parametrize("stage", ["scheduler", "counter", "rng", "optimizer", "model"])
def test_a_load_failing_at_any_stage_changes_nothing(tmp_path, monkeypatch, stage):
    saved = _objects(seed=2)
    random.seed(5)
    save_checkpoint(tmp_path / "c", saved)
    objects = _objects(seed=0, fail=stage)
    error = _failing_stage(objects, stage, monkeypatch)
    torch.manual_seed(77)
    random.seed(78)
    before = _everything(objects)
    assert not _same(before["model"], _plain(saved["model"].state_dict()))
    with pytest.raises(error) as caught:
        load_checkpoint(tmp_path / "c", objects)
    _assert_unchanged(before, objects)
    assert "put back as it was before the load" in "".join(getattr(caught.value,
                                                                   "__notes__", [""]))
    # the same objects, without the failure, do load (the check above is not vacuous)
    monkeypatch.undo()
    clean = _objects(seed=0)
    load_checkpoint(tmp_path / "c", clean)
    assert _same(_plain(clean["model"].state_dict()), _plain(saved["model"].state_dict()))
    assert clean["last"].n == saved["last"].n


def test_a_successful_load_keeps_a_checked_model_without_copying_it(tmp_path):
    saved = _objects(seed=1)
    save_checkpoint(tmp_path / "c", saved)
    objects = _objects(seed=0)
    assert loads_certainly(objects["model"])  # BatchNorm's loader is checked as torch's
    with all_or_nothing() as rollback:
        load_checkpoint(tmp_path / "c", objects)
        assert rollback.copied_bytes == 0  # optimizer kept by reference, model not copied
    assert objects["counter"].n == saved["counter"].n


def test_models_with_loaders_of_their_own_are_not_certain():
    hooked = nn.Linear(2, 2)
    hooked.register_load_state_dict_post_hook(lambda module, keys: None)

    class Extra(nn.Linear):
        def get_extra_state(self):
            return {"tag": 1}

        def set_extra_state(self, state):
            self.tag = state["tag"]

    assert not loads_certainly(hooked)
    assert not loads_certainly(nn.Sequential(Extra(2, 2)))
    assert loads_certainly(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))


def test_rollback_restores_models_optimizers_and_rng_exactly():
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    model.register_buffer("seen", torch.arange(3.0))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    other = torch.optim.Adam(model.parameters(), lr=0.5)
    other.step()  # a state of the same shape, other values and step counts
    before = (_plain(model.state_dict()), _plain(optimizer.state_dict()), torch.get_rng_state())
    state_tensors = [t for s in optimizer.state.values() for t in s.values()]
    rollback = Rollback()
    rollback.keep(model)
    rollback.keep(optimizer, copy=True)
    rollback.keep_rng()
    with torch.no_grad():
        model.weight.mul_(3)
        model.seen.zero_()
    for t in state_tensors:  # an in-place load (DCP's) writes into the state tensors
        t.add_(1)
    optimizer.load_state_dict(other.state_dict())  # torch's load replaces them
    torch.manual_seed(123)
    assert rollback.restore() == []
    assert _same(_plain(model.state_dict()), before[0])
    assert _same(_plain(optimizer.state_dict()), before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    assert [t for s in optimizer.state.values() for t in s.values()] == state_tensors


def test_a_failing_writer_load_puts_back_the_writer_objects_and_the_rest(tmp_path,
                                                                         monkeypatch):
    """Per-rank layout (DCP, one process): the writer's load writes into the model and
    optimizer in place, then fails; they, the replicated objects and the RNG go back."""
    saved = _objects(seed=2)
    save_rank_state(tmp_path / "c", DCPWriter(), {"model": saved["model"],
                                                  "optimizer": saved["optimizer"]},
                    replicated={"counter": saved["counter"]}, rng=True)
    objects = _objects(seed=0)
    real = DCPWriter.load

    def load_then_fail(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise OSError("disk went away")
    monkeypatch.setattr(DCPWriter, "load", load_then_fail)
    torch.manual_seed(9)
    before = _everything(objects)
    with pytest.raises(OSError, match="disk went away"):
        load_rank_state(tmp_path / "c", DCPWriter(), {"model": objects["model"],
                                                      "optimizer": objects["optimizer"]},
                        replicated={"counter": objects["counter"]}, rng=True)
    _assert_unchanged(before, objects)
    monkeypatch.undo()  # and without the failure it loads
    load_rank_state(tmp_path / "c", DCPWriter(), {"model": objects["model"],
                                                  "optimizer": objects["optimizer"]},
                    replicated={"counter": objects["counter"]}, rng=True)
    assert _same(_plain(objects["model"].state_dict()), _plain(saved["model"].state_dict()))
    assert objects["counter"].n == saved["counter"].n

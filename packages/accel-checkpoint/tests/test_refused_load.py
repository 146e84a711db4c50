"""A refused load changes nothing: states that cannot fit their objects (shapes, keys,
parameter groups) are refused before any object is changed, and an object whose
load_state_dict raises gets the objects loaded before it restored."""

from __future__ import annotations

import pytest
import torch
from accel_checkpoint import CheckpointError, load_checkpoint, read_object, save_checkpoint
from accel_checkpoint.applying import state_problem
from torch import nn


class Counter:
    def __init__(self, fail: bool = False) -> None:
        self.n, self.fail = 0, fail

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        if self.fail:
            raise KeyError("counter refuses")
        self.n = state["n"]


def _objects(seed: int, second: nn.Module | None = None, groups: int = 1):
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    other = second if second is not None else nn.Linear(3, 2)
    params = list(model.parameters())
    param_groups = ([{"params": params}] if groups == 1 else
                    [{"params": params[:1]}, {"params": params[1:]}])
    optimizer = torch.optim.SGD(param_groups, lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {"model": model, "model_1": other, "optimizer": optimizer, "scheduler": scheduler,
            "counter": Counter()}


def _snapshot(objects):
    return {name: _clone(obj.state_dict()) for name, obj in objects.items()}


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture
def saved(tmp_path):
    objects = _objects(0)
    objects["counter"].n = 7
    for _ in range(2):  # a scheduler state the fresh objects do not have
        objects["optimizer"].step()
        objects["scheduler"].step()
    return save_checkpoint(tmp_path / "ckpt", objects, data={"step": 3})


def _refused_without_change(path, objects, match, error=CheckpointError):
    before, rng = _snapshot(objects), torch.get_rng_state()
    with pytest.raises(error, match=match):
        load_checkpoint(path, objects)
    after = _snapshot(objects)
    assert all(_same(before[name], after[name]) for name in objects), "an object changed"
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("second, match", [
    (nn.Linear(3, 5), r"model_1: shape mismatch: weight \(2, 3\) \(the model has \(5, 3\)\)"),
    (nn.Sequential(nn.Linear(3, 2)), r"model_1: missing keys 0\.bias, 0\.weight; unexpected"),
], ids=["shape", "keys"])
def test_a_model_that_does_not_fit_changes_nothing(saved, second, match):
    _refused_without_change(saved, _objects(1, second=second), match)


def test_other_parameter_groups_change_nothing(saved):
    _refused_without_change(saved, _objects(1, groups=2),
                            r"optimizer: 1 parameter group\(s\) saved, the optimizer has 2")


def test_every_problem_is_listed_at_once(saved):
    _refused_without_change(saved, _objects(1, second=nn.Linear(3, 5), groups=2),
                            r"model_1: shape.*\| optimizer: 1 parameter group")


def test_an_object_that_raises_gets_the_others_restored(saved):
    objects = _objects(1)
    objects["counter"] = Counter(fail=True)
    _refused_without_change(saved, objects, "counter refuses", KeyError)


def test_a_module_with_its_own_loading_decides_for_its_keys(tmp_path):
    """BatchNorm fills a missing num_batches_tracked itself: not refused up front."""
    bn = nn.BatchNorm1d(3)
    state = {k: v for k, v in bn.state_dict().items() if k != "num_batches_tracked"}
    assert state_problem(nn.BatchNorm1d(3), state) is None
    path = save_checkpoint(tmp_path / "bn", {"model": state})
    load_checkpoint(path, {"model": nn.BatchNorm1d(3)})
    assert state_problem(nn.Linear(3, 2), {"weight": torch.zeros(2, 3)}) == "missing keys bias"


def test_a_fitting_load_still_loads_everything(saved):
    objects = _objects(1)
    load_checkpoint(saved, objects)
    assert objects["counter"].n == 7
    assert torch.equal(objects["model"].weight, read_object(saved, "model")["weight"])
    assert objects["scheduler"].last_epoch == 3

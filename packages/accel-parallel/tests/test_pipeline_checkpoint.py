"""A pipeline stage's optimizer in checkpoints (no process group: one stage, by hand): the
state is keyed by the whole model's names, so any split reads it; the 0.3.6 layout (state
nested under ``pp<rank>``) loads at its own split and is refused elsewhere, naming why."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from accel_parallel.pipeline.checkpoint import StageOptimizer
from accel_state import ConfigurationError
from torch import nn


def _stage(pp_rank: int = 0):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    module(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    pipeline = SimpleNamespace(module=module, topology=SimpleNamespace(pp_rank=pp_rank))
    return module, optimizer, pipeline


def test_groups_name_the_whole_model_and_load_keeps_this_stages_names() -> None:
    module, optimizer, pipeline = _stage()
    whole = [["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]]
    stage = StageOptimizer(pipeline, optimizer, whole)
    saved = copy.deepcopy(stage.state_dict())  # the live tensors are zeroed below
    assert saved["param_groups"][0]["params"] == whole[0]
    assert sorted(saved["state"]) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    keys = {f"optimizer.state.{n}.exp_avg" for n in saved["state"]}
    assert stage.state_dict_to_load(keys, "optimizer").keys() == saved.keys()
    before = {n: s["exp_avg"].clone() for n, s in saved["state"].items()}
    for state in optimizer.state.values():
        state["exp_avg"].zero_()
    stage.load_state_dict(saved)  # the other stage's "2.*" names are dropped, not refused
    after = stage.state_dict()["state"]
    assert all(torch.equal(after[n]["exp_avg"], before[n]) for n in before)


def test_the_older_layout_loads_at_its_split_and_is_refused_at_another() -> None:
    _, optimizer, pipeline = _stage(pp_rank=1)
    stage = StageOptimizer(pipeline, optimizer)
    legacy = {"optimizer.pp1.state.0.weight.exp_avg", "optimizer.pp0.state.x.exp_avg"}
    wanted = stage.state_dict_to_load(legacy, "optimizer")
    assert list(wanted) == ["pp1"] and "state" in wanted["pp1"]
    stage.load_state_dict(wanted)  # the nested form is unwrapped
    with pytest.raises(ConfigurationError, match=r"accel-parallel 0\.3\.6 or older.*'pp1'.*"
                       r"load it with the pipeline size and stage split that saved it"):
        stage.state_dict_to_load({"optimizer.pp0.state.x.exp_avg"}, "optimizer")

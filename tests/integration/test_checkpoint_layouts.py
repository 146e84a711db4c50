"""The Accelerator's checkpoints follow the layout its strategy names, in one process.

``Strategy.checkpoint_format(models)`` names a registered layout or hands over a
``RankCheckpointWriter``; save_state / load_state / get_state_dict / save_model use it
without asking which one it is. A sharded checkpoint loads into models saved replicated
and back (through full state dicts); any other layout is refused with the fix. FSDP2
models in 2 processes: test_checkpoint_sharded_facade.py and (across layouts and world
sizes) test_checkpoint_across_layouts.py; a writer of the test's own in 2 processes:
test_checkpoint_per_rank.py.
"""

from __future__ import annotations

import importlib
import types
from pathlib import Path

import pytest
import torch
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.manifest import read_manifest
from accel_state.errors import ConfigurationError
from torch import nn

from accel import Accelerator
from accel._checkpoint_layouts import check_layout
from accel.utils import ProjectConfiguration


@pytest.fixture
def writers(monkeypatch, repo):
    """accel-checkpoint's test writers (packages/accel-checkpoint/tests/checkpoint_writers.py,
    which the 2-process script uses too)."""
    monkeypatch.syspath_prepend(str(repo / "packages" / "accel-checkpoint" / "tests"))
    return importlib.import_module("checkpoint_writers")


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def prepared(fmt=None, seed: int = 0, **kwargs):
    """An Accelerator whose strategy names ``fmt`` (default: its own choice), with a
    prepared model, optimizer and scheduler after one step."""
    accelerator = Accelerator(cpu=True, **kwargs)
    if fmt is not None:
        accelerator.strategy.checkpoint_format = lambda models: fmt
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.backward(model(torch.ones(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return accelerator, model, optimizer, scheduler


# -- the layout check ---------------------------------------------------------------------------
def test_matching_layouts_pass():
    check_layout("sharded", 2, "sharded", "ckpt")
    check_layout("replicated", 1, "replicated", "ckpt")
    check_layout("not-registered", 1, "not-registered", "ckpt")  # a strategy's own writer


def test_sharded_and_replicated_checkpoints_load_into_each_other():
    check_layout("sharded", 4, "replicated", "ckpt")  # through full state dicts
    check_layout("replicated", 2, "sharded", "ckpt")


def test_deepspeed_checkpoints_load_into_other_models_not_the_reverse():
    check_layout("deepspeed", 2, "replicated", "ckpt")  # ZeRO partitions read whole
    check_layout("deepspeed", 2, "sharded", "ckpt")
    with pytest.raises(CheckpointError, match="/runs/ckpt is a sharded checkpoint .* DeepSpeed "
                                              "engines.*accel merge-weights /runs/ckpt OUT"):
        check_layout("sharded", 2, "deepspeed", "/runs/ckpt")
    with pytest.raises(CheckpointError, match="replicated checkpoint .*load_checkpoint_in_"
                                              "model\\(model, '/runs/ckpt'\\)"):
        check_layout("replicated", 1, "deepspeed", "/runs/ckpt")


def test_other_mismatches_name_both_layouts_and_unknown_ones_say_upgrade():
    with pytest.raises(CheckpointError, match="'replicated' checkpoint .* the 'test-engine' "
                                              "layout .* same strategy"):
        check_layout("replicated", 1, "test-engine", "ckpt")
    with pytest.raises(CheckpointError, match="layout 'pipeline'.*'replicated', 'sharded'.*"
                                              "upgrade accel"):
        check_layout("pipeline", 1, "replicated", "ckpt")


# -- across layouts, in one process ------------------------------------------------------------
def _states(model, optimizer, scheduler):
    """Weights, Adam's state and the scheduler's LR, comparable between two runs."""
    out = {f"p/{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for index, values in optimizer.state_dict()["state"].items():
        out.update({f"o/{index}/{k}": v.clone() for k, v in values.items()})
    out["lr"] = torch.tensor(scheduler.get_last_lr())
    return out


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


@pytest.mark.parametrize(("saved", "loaded"), [("sharded", None), (None, "sharded")])
def test_sharded_and_replicated_checkpoints_load_across_with_the_optimizer(tmp_path, saved,
                                                                           loaded):
    accelerator, model, optimizer, scheduler = prepared(saved)
    accelerator.step = 7
    path = accelerator.save_state(tmp_path / "ckpt")
    expected = _states(model, optimizer, scheduler)
    assert read_manifest(path).layout == (saved or "replicated")
    again, model2, optimizer2, scheduler2 = prepared(loaded, seed=1)
    again.load_state(path)
    assert _same(_states(model2, optimizer2, scheduler2), expected) and again.step == 7
    for run in ((model, optimizer), (model2, optimizer2)):  # one more step, alike
        run[0](torch.ones(2, 4)).sum().backward()
        run[1].step()
    assert _same(_states(model2, optimizer2, scheduler2), _states(model, optimizer, scheduler))


def test_refused_loads_across_layouts_change_nothing(tmp_path):
    accelerator = prepared("sharded")[0]
    path = Path(accelerator.save_state(tmp_path / "ckpt"))
    # another parameter grouping: refused before the model (checked alike) is touched
    other = Accelerator(cpu=True)
    torch.manual_seed(5)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.Adam([{"params": [model.weight]}, {"params": [model.bias]}])
    model, optimizer = other.prepare(model, optimizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="optimizer: 1 parameter group.* nothing was "
                                              "loaded|nothing was loaded.*optimizer: 1 param"):
        other.load_state(path)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not optimizer.state and other.step == 0
    # a flipped byte in a shard: named, nothing read
    shard = next(p for p in path.iterdir() if p.suffix == ".distcp")
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    plain, model3, optimizer3, scheduler3 = prepared(seed=2)
    kept = _states(model3, optimizer3, scheduler3)
    with pytest.raises(CorruptCheckpointError, match=shard.name):
        plain.load_state(path)
    assert _same(_states(model3, optimizer3, scheduler3), kept)


# -- the Accelerator through its strategy's layout ----------------------------------------------
def test_a_writer_from_the_strategy_saves_and_loads_through_the_facade(writers, tmp_path):
    writer = writers.SafetensorsWriter()
    accelerator, model, optimizer, scheduler = prepared(writer)
    counter = Counter()
    counter.value = 5
    accelerator.register_for_checkpointing(counter)
    seen = []
    accelerator.register_save_state_pre_hook(lambda models, weights, out: seen.append(weights))
    accelerator.step = 3
    path = accelerator.save_state(tmp_path / "ckpt")
    assert seen == [[]]  # the writer saves the models: no full state dicts for the hooks
    manifest = read_manifest(path)
    assert manifest.layout == "test-safetensors"
    assert manifest.metadata["sharded_objects"] == {"model": "model", "optimizer": "optimizer"}
    assert {"rank0.safetensors", "scheduler.json", "custom_checkpoint_0.json",
            "random_states_0.safetensors"} <= set(manifest.files)

    again, model2, optimizer2, scheduler2 = prepared(writers.SafetensorsWriter(), seed=1)
    counter2 = Counter()
    again.register_for_checkpointing(counter2)
    again.load_state(path)
    assert torch.equal(model2.weight, model.weight) and counter2.value == 5
    assert again.step == 3 and scheduler2.get_last_lr() == scheduler.get_last_lr()
    assert torch.equal(optimizer2.state_dict()["state"][0]["exp_avg"],
                       optimizer.state_dict()["state"][0]["exp_avg"])

    plain = prepared(seed=1)[0]  # the strategy's own choice: replicated
    with pytest.raises(CheckpointError, match="layout 'test-safetensors'.* saved in the "
                                              "'replicated' layout.*prepare the models with "
                                              "that strategy"):
        plain.load_state(path)


def test_get_state_dict_and_save_model_ask_the_layout(writers, tmp_path):
    writer = writers.SafetensorsWriter()
    accelerator, model, _, _ = prepared(writer)
    assert set(accelerator.get_state_dict(model)) == {"weight", "bias"}
    accelerator.save_model(model, tmp_path / "weights")
    assert writer.full_state_dicts == 2
    assert (tmp_path / "weights" / "model.safetensors").is_file()


def test_save_on_each_node_is_refused_when_every_rank_writes_its_own_files(tmp_path):
    accelerator = prepared("sharded", project_config=ProjectConfiguration(
        str(tmp_path), save_on_each_node=True))[0]
    with pytest.raises(ConfigurationError, match="save_on_each_node=True cannot be used"):
        accelerator.save_state(tmp_path / "ckpt")
    assert not any(tmp_path.iterdir())
    assert accelerator.save_iteration == 0


def test_unknown_layouts_and_strategies_without_a_format_are_named(tmp_path, monkeypatch):
    accelerator, model, _, _ = prepared("shraded")
    with pytest.raises(ConfigurationError, match="Did you mean 'sharded'"):
        accelerator.save_state(tmp_path / "ckpt")
    monkeypatch.setattr(accelerator, "_strategy", types.SimpleNamespace())
    with pytest.raises(ConfigurationError, match="has no checkpoint_format"):
        accelerator.get_state_dict(model)


def test_a_pickling_writer_loads_only_when_trusted(writers, tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEL_CHECKPOINT_TRUST_PICKLES", raising=False)
    accelerator, model, _, _ = prepared(writers.PickleWriter())
    path = accelerator.save_state(tmp_path / "ckpt")
    writer = writers.PickleWriter()
    again, model2, _, _ = prepared(writer, seed=1)
    with pytest.raises(CheckpointError, match="trust_pickles=True"):
        again.load_state(path)
    assert writer.loads == 0 and not torch.equal(model2.weight, model.weight)
    again.load_state(path, trust_pickles=True)
    assert writer.loads == 1 and torch.equal(model2.weight, model.weight)

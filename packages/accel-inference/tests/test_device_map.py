"""infer_auto_device_map, check_device_map and tied parameters (fake GPU ids, as Accelerate's
tests use: placement is pure arithmetic on sizes)."""

from __future__ import annotations

import pytest
import torch
from accel_inference import (
    check_device_map,
    compute_module_sizes,
    find_tied_parameters,
    infer_auto_device_map,
    init_empty_weights,
    retie_parameters,
)
from accel_inference.device_map import clean_device_map
from accel_inference.tied import device_of
from accel_state.errors import ConfigurationError
from torch import nn


def _used(device_map, sizes, device):
    return sum(sizes.get(name, 0) for name, d in device_map.items() if d == device)


def test_auto_map_respects_max_memory_and_no_split(models):
    with init_empty_weights():
        model = models.TinyLM(depth=6)
    sizes = compute_module_sizes(model)
    block = sizes["blocks.0"]
    memory = {0: int(2.5 * block), 1: int(2.5 * block), "cpu": int(2.2 * block)}
    device_map = infer_auto_device_map(model, memory, no_split_module_classes=["Block"])
    check_device_map(model, device_map)
    for name in device_map:  # blocks are never split
        assert not name.startswith("blocks.") or name.count(".") == 1, device_map
    # GPU 0 and the CPU keep room for the largest block (offloaded blocks run there)
    assert _used(device_map, sizes, 0) <= memory[0] - block
    assert _used(device_map, sizes, 1) <= memory[1]
    assert _used(device_map, sizes, "cpu") <= memory["cpu"] - block
    assert list(dict.fromkeys(device_map.values())) == [0, 1, "cpu", "disk"]
    # without no_split, blocks are split to fill the devices more tightly
    split = infer_auto_device_map(model, memory)
    assert any(name.count(".") >= 2 for name in split), split
    assert infer_auto_device_map(model, {0: 10**9}) == {"": 0}


def test_tied_parameters_stay_together(models):
    with init_empty_weights():
        model = models.TinyLM(depth=3)
    tied = find_tied_parameters(model)
    assert tied == [["embed.weight", "head.weight"]]
    sizes = compute_module_sizes(model)
    # GPU 0 fits the embedding but nothing more: the tied head must come along to GPU 0
    memory = {0: sizes["embed"] + sizes["blocks.0"] + 64, 1: 10**6, "cpu": 10**6}
    device_map = infer_auto_device_map(model, memory, no_split_module_classes=["Block"],
                                       clean_result=False)
    assert device_of("head.weight", device_map) == device_of("embed.weight", device_map) == 0
    untied = nn.Linear(2, 2)
    untied.weight = nn.Parameter(torch.ones(2, 2))
    assert find_tied_parameters(untied) == []


def test_retie_after_loading_replaced_one_name(models):
    model = models.TinyLM()
    tied = find_tied_parameters(model)
    model.head._parameters["weight"] = nn.Parameter(torch.zeros_like(model.head.weight))
    assert model.head.weight is not model.embed.weight
    retie_parameters(model, tied)
    assert model.head.weight is model.embed.weight


def test_fallback_allocation_fills_an_otherwise_empty_device():
    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.big = nn.Linear(64, 64)   # 16640 B
            self.small = nn.Linear(4, 4)   # 80 B
            self.big2 = nn.Linear(64, 64)  # 16640 B

    with init_empty_weights():
        model = Three()
    # GPU 0 keeps 16640 B for big2 while big is placed: 3360 B left, big goes on
    memory = {0: 20000, "cpu": 10**6}
    assert infer_auto_device_map(model, memory) == {"": "cpu"}
    # the fallback puts the first block that fits the 3360 B there before moving on
    assert infer_auto_device_map(model, memory, fallback_allocation=True) == \
        {"big": "cpu", "small": 0, "big2": "cpu"}


def test_check_device_map_names_unplaced_and_unknown(models):
    model = models.TinyLM(depth=2)
    with pytest.raises(ConfigurationError, match=r"parameters: blocks\.1\.a\.weight, "
                       r"blocks\.1\.a\.bias, blocks\.1\.b\.weight"):
        check_device_map(model, {"embed": "cpu", "head": "cpu", "blocks.0": 0, "scale": "cpu",
                                 "blocks.1.norm": "cpu"})
    # as in Accelerate: unknown keys warn (the map still covers the model), devices unchecked
    with pytest.warns(UserWarning, match=r"do not match any submodules in the model: "
                      r"\['blocks.7'\]"):
        check_device_map(model, {"": "cpu", "blocks.7": 0})
    check_device_map(model, {"": "gpu1"})
    check_device_map(model, {"": "cpu"})


def test_clean_device_map_merges_whole_modules():
    raw = {"a.x": 0, "a.y": 0, "b.x": 0, "b.y": "cpu", "c": "cpu"}
    assert clean_device_map(dict(raw)) == {"a": 0, "b.x": 0, "b.y": "cpu", "c": "cpu"}
    assert clean_device_map({"a.x": 0, "a.y": 0}) == {"": 0}

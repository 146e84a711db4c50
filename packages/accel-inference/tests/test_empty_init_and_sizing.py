"""Meta initialisation, module sizes and memory parsing."""

from __future__ import annotations

import resource

import pytest
import torch
from accel_inference import (
    calculate_maximum_sizes,
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_balanced_memory,
    get_max_layer_size,
    get_max_memory,
    init_empty_weights,
    init_on_device,
)
from accel_state.errors import ConfigurationError
from torch import nn


def test_meta_init_builds_no_storage(models, monkeypatch):
    monkeypatch.delenv("ACCEL_INIT_INCLUDE_BUFFERS", raising=False)
    monkeypatch.delenv("ACCELERATE_INIT_INCLUDE_BUFFERS", raising=False)
    normal_, register = nn.init.normal_, nn.Module.register_parameter
    with init_empty_weights():
        models.TinyLM()  # warm up lazy imports, so the peak below is the model's only
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with init_empty_weights():
        big = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(16)])  # 4 GiB if real
        model = models.TinyLM()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024, f"peak RSS grew by {grown_kib} KiB"
    assert all(p.is_meta and p.data_ptr() == 0 for p in big.parameters())
    assert all(type(p) is nn.Parameter and p.requires_grad for p in model.parameters())
    assert model.head.weight is model.embed.weight  # ties survive
    assert model.scale.device.type == "cpu" and model.scale.item() == 0.5  # buffers stay
    assert nn.Linear(2, 2).weight.device.type == "cpu"  # patch removed after the block
    assert nn.init.normal_ is normal_ and nn.Module.register_parameter is register
    with init_empty_weights(include_buffers=True):
        model = models.TinyLM()
    assert model.scale.device.type == "meta" and model.blocks[0].norm.running_mean.is_meta
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    with init_empty_weights():
        assert nn.BatchNorm1d(3).running_mean.is_meta


def test_init_on_device_keeps_parameter_class():
    class Tagged(nn.Parameter):
        pass

    with init_on_device("meta"):
        layer = nn.Linear(3, 3)
        layer.extra = Tagged(torch.ones(2), requires_grad=False)
    assert type(layer.extra) is Tagged and layer.extra.is_meta and not layer.extra.requires_grad


def test_module_sizes_dtype_and_largest_layer(models):
    model = models.TinyLM(vocab=32, width=16, depth=2)
    sizes = compute_module_sizes(model)
    linear = (16 * 16 + 16) * 4
    norm = 16 * 2 * 4 + 16 * 2 * 4 + 8  # weight, bias, running mean/var, num_batches (int64)
    assert sizes["blocks.0.a"] == linear and sizes["blocks.0"] == 2 * linear + norm
    # head tied: counted once; buffers "scale" and the non-persistent "cache" count too
    assert sizes[""] == 32 * 16 * 4 + 2 * sizes["blocks.0"] + 4 + 4
    half = compute_module_sizes(model, dtype="float16")
    assert half["blocks.0.a"] == linear // 2 and half["blocks.0.norm.num_batches_tracked"] == 8
    special = compute_module_sizes(model, dtype=torch.float16,
                                   special_dtypes={"blocks.0.a.weight": torch.float32})
    assert special["blocks.0.a"] == 16 * 16 * 4 + 16 * 2
    assert compute_module_total_buffer_size(model) == 2 * (16 * 2 * 4 + 8) + 4 + 4
    items = list(model.named_children())
    assert get_max_layer_size(items, sizes, ["Block"]) == (sizes["blocks.0"],
                                                           ["blocks.0", "blocks.1"])
    assert get_max_layer_size(items, sizes, []) == (32 * 16 * 4, ["embed"])
    total, (largest, names) = calculate_maximum_sizes(model)
    assert total == sizes[""] and largest == 32 * 16 * 4 and names == ["embed"]


def test_max_memory_parsing_and_order():
    assert get_max_memory({"cpu": "1GiB", 1: "500MB", 0: 10, "disk": "2 GB"}) == {
        0: 10, 1: 500 * 10**6, "cpu": 2**30, "disk": 2 * 10**9}
    assert get_max_memory({"cuda:1": "1KB"}) == {1: 1000}
    found = get_max_memory()
    assert found["cpu"] > 0
    with pytest.raises(ConfigurationError, match="'ten gigs'"):
        get_max_memory({0: "ten gigs"})
    with pytest.raises(ConfigurationError, match="'gpu7'"):
        get_max_memory({"gpu7": "1GB"})


def test_balanced_memory_spreads_over_gpus(models):
    model = models.TinyLM(depth=8)
    total = compute_module_sizes(model)[""]
    balanced = get_balanced_memory(model, {0: 10**9, 1: 10**9, "cpu": 10**9},
                                   no_split_module_classes=["Block"])
    assert total // 2 < balanced[0] < total and balanced[1] == 10**9
    low = get_balanced_memory(model, {0: 10**9, 1: 10**9, 2: 10**9}, low_zero=True)
    assert low[0] < balanced[0]

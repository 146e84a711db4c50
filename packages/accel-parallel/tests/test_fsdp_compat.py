"""Accelerate's FSDP helpers transformers calls: RAM-efficient loading switches, names."""

from __future__ import annotations

import os

import torch
from accel_parallel import FullyShardedDataParallelPlugin
from accel_parallel.fsdp_compat import (
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    fsdp2_canonicalize_names,
)


def test_ram_efficient_loading_switches_reach_the_plugin(monkeypatch):
    for name in ("ACCEL_USE_FSDP", "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING"):
        monkeypatch.setenv(name, "x")  # registered so monkeypatch restores (removes) them
        monkeypatch.delenv(name)
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCEL_USE_FSDP"] == "true"
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.cpu_ram_efficient_loading is True and plugin.sync_module_states is True
    disable_fsdp_ram_efficient_loading()
    assert FullyShardedDataParallelPlugin().cpu_ram_efficient_loading is False
    monkeypatch.setenv("ACCEL_USE_FSDP", "false")  # a choice already made is kept
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCEL_USE_FSDP"] == "false"


def test_canonical_names_drop_checkpoint_and_compile_wrappers():
    weight = torch.zeros(1)
    named = {"_orig_mod.layers.0._checkpoint_wrapped_module.attn.weight": weight,
             "layers.1._orig_mod.mlp.bias": 1, "head.weight": 2}
    assert fsdp2_canonicalize_names(named) == {
        "layers.0.attn.weight": weight, "layers.1.mlp.bias": 1, "head.weight": 2}

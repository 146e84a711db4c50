"""``accel_parallel.state_view``: what ``AcceleratorState`` reports about the parallelism,
decided beside the plugins so the facade names no backend (issue 40.6)."""

from __future__ import annotations

import pytest
from accel_parallel.state_view import (
    PLUGIN_ATTRIBUTES,
    plugin_named,
    refuse_other_runs,
    refuse_unsupported_plugins,
    requested_view,
    selected_plugin,
)
from accel_state import ConfigurationError, DistributedType


class _Plugin:
    def __init__(self, selected: bool = False) -> None:
        self.selected = selected


def test_the_plugins_land_in_accelerates_attributes():
    assert PLUGIN_ATTRIBUTES == {"dynamo_plugin", "deepspeed_plugins", "fsdp_plugin",
                                 "torch_tp_plugin", "parallelism_config", "megatron_lm_plugin"}
    lone, fsdp = _Plugin(), object()
    view = requested_view(DistributedType.NO, deepspeed_plugin=lone)
    assert view.distributed_type is DistributedType.DEEPSPEED and not view.shards_parameters
    assert view.plugins["deepspeed_plugins"] == {"default": lone}  # always by name
    assert set(view.plugins) == PLUGIN_ATTRIBUTES and view.plugins["megatron_lm_plugin"] is None
    view = requested_view(DistributedType.MULTI_CPU, fsdp_plugin=fsdp)
    assert view.distributed_type is DistributedType.FSDP and view.shards_parameters
    assert view.plugins["fsdp_plugin"] is fsdp and view.plugins["deepspeed_plugins"] is None


def test_fsdp_asked_for_by_the_launcher_alone_is_the_run_type_but_no_shards(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    view = requested_view(DistributedType.NO)
    assert view.distributed_type is DistributedType.FSDP and not view.shards_parameters


def test_a_named_family_gives_the_selected_plugin_and_names_a_missing_one():
    first, chosen = _Plugin(), _Plugin(selected=True)
    assert selected_plugin(None) is None and selected_plugin({}) is None
    assert selected_plugin({"a": first}) is first
    assert selected_plugin({"a": first, "b": chosen}) is chosen
    assert plugin_named({"a": first}, "a") is first
    with pytest.raises(ConfigurationError, match=r"No DeepSpeed plugin named 'x'.*\['a'\]"):
        plugin_named({"a": first}, "x")


def test_a_helper_needing_deepspeed_is_refused_in_another_run():
    refuse_other_runs("deepspeed_required", "f", DistributedType.DEEPSPEED)
    with pytest.raises(ConfigurationError,
                       match=r"f needs DeepSpeed, but this run's Accelerator uses "
                             r"DistributedType.FSDP.*deepspeed_plugin=DeepSpeedPlugin"):
        refuse_other_runs("deepspeed_required", "f", DistributedType.FSDP)


def test_megatron_is_refused_by_argument_and_by_variable(monkeypatch):
    refuse_unsupported_plugins("Accelerator")
    with pytest.raises(ConfigurationError,
                       match=r"AcceleratorState\(megatron_lm_plugin=1\) is refused: .*"
                             r"ParallelismConfig\(tp_size"):
        refuse_unsupported_plugins("AcceleratorState", megatron_lm_plugin=1)
    monkeypatch.setenv("ACCELERATE_USE_MEGATRON_LM", "true")
    with pytest.raises(ConfigurationError, match="ACCELERATE_USE_MEGATRON_LM=true asks for"):
        refuse_unsupported_plugins("Accelerator")

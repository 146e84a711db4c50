"""Plugin resolution as data (accel_parallel.plugins): the kinds that cannot run together are
declared once and every reader (resolution, the DeepSpeed strategy, the mesh strategy's
``accepts``) follows that one table; a refused resolution changes nothing."""

from __future__ import annotations

import pytest
from accel_parallel import FullyShardedDataParallelPlugin, ParallelismConfig, StrategyConfig
from accel_parallel import plugins as plugins_module
from accel_parallel.mesh.strategy import ParallelismStrategy
from accel_parallel.plugins import EXCLUSIVE, conflicts, resolve_plugins
from accel_precision import NoPrecision
from accel_state import ConfigurationError


def test_conflicts_read_the_one_table_both_ways(monkeypatch):
    given = {"deepspeed": {}, "fsdp": object(), "tp": None, "dynamo": object()}
    assert conflicts("deepspeed", given) == ["fsdp"]
    assert conflicts("fsdp", given) == ["deepspeed"]
    assert conflicts("dynamo", given) == []
    monkeypatch.setitem(EXCLUSIVE, "deepspeed", frozenset({"dynamo"}))  # the table decides
    assert conflicts("deepspeed", given) == ["dynamo"]


def test_the_mesh_strategy_steps_aside_where_the_table_says(state, monkeypatch):
    config = StrategyConfig(state=state, precision=NoPrecision(),
                            plugins={"parallelism_config": ParallelismConfig(),
                                     "deepspeed": {"default": object()}})
    assert not ParallelismStrategy.accepts(config)
    monkeypatch.setattr(plugins_module, "EXCLUSIVE", {})
    assert ParallelismStrategy.accepts(config)


def test_fsdp_with_deepspeed_is_refused_before_anything_is_set(monkeypatch):
    deepspeed_plugin = pytest.importorskip("accel_parallel.deepspeed.plugin")
    plugin = deepspeed_plugin.DeepSpeedPlugin(gradient_accumulation_steps=4)
    with pytest.raises(ConfigurationError, match=r"FSDP and DeepSpeed are both enabled "
                                                 r"\(fsdp_plugin= and a DeepSpeed plugin\)"):
        resolve_plugins(fsdp_plugin=FullyShardedDataParallelPlugin(), deepspeed_plugin=plugin)
    resolved = resolve_plugins(deepspeed_plugin=plugin, accumulation_steps=1)
    assert resolved.accumulation_steps == 4 and set(resolved.plugins) == {"deepspeed"}
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigurationError, match="ACCELERATE_USE_FSDP=true and a DeepSpeed"):
        resolve_plugins(deepspeed_plugin=plugin)


def test_the_run_type_before_a_strategy_follows_the_one_table(monkeypatch):
    """``AcceleratorState()`` built before an Accelerator asks this rule: a plugin given, or
    its ``ACCELERATE_USE_*`` variable; DeepSpeed over FSDP; else the process state's."""
    from accel_parallel.plugins import LAUNCH_KINDS, enabled, requested_distributed_type
    from accel_state import DistributedType

    for name in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED",
                 "ACCEL_USE_FSDP", "ACCEL_USE_DEEPSPEED"):
        monkeypatch.delenv(name, raising=False)
    no = DistributedType.NO
    assert requested_distributed_type(no) is no
    assert requested_distributed_type(no, fsdp=object()) is DistributedType.FSDP
    assert requested_distributed_type(no, fsdp=object(), deepspeed=object()) \
        is DistributedType.DEEPSPEED
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert enabled("fsdp", None) and not enabled("deepspeed", None)
    assert requested_distributed_type(DistributedType.MULTI_CPU) is DistributedType.FSDP
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "1")
    assert requested_distributed_type(no) is DistributedType.DEEPSPEED
    assert LAUNCH_KINDS["parallelism_config"][1] is None  # the strategy decides that one

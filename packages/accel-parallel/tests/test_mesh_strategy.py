"""The mesh strategy: one order of steps for every mesh, and the data-parallel step each set of
sizes asks for (the 2- and 4-process behaviour is in tests/integration/test_tensor_parallel.py
and test_fsdp.py)."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import FSDP2Strategy, FullyShardedDataParallelPlugin, ParallelismConfig
from accel_parallel.mesh.strategy import DataParallelStep, MeshStrategy, ParallelismStrategy


@pytest.mark.parametrize("sizes, sharding, step", [
    ({}, False, DataParallelStep.NONE),
    ({"tp_size": 2}, False, DataParallelStep.NONE),
    ({"dp_replicate_size": 2}, False, DataParallelStep.DDP),
    ({"dp_replicate_size": 2, "tp_size": 2}, False, DataParallelStep.REPLICATE),
    ({"dp_shard_size": 2}, True, DataParallelStep.FSDP),
    ({"dp_shard_size": 2, "tp_size": 2}, True, DataParallelStep.FSDP),
    ({"dp_replicate_size": 2, "dp_shard_size": 2}, True, DataParallelStep.HSDP),
    ({"dp_replicate_size": 2}, True, DataParallelStep.REPLICATE),  # FSDP's NO_SHARD
    ({}, True, DataParallelStep.FSDP),  # an FSDP plugin on one process
])
def test_the_data_parallel_step_is_the_one_the_mesh_asks_for(sizes, sharding, step):
    assert DataParallelStep.for_mesh(ParallelismConfig(**sizes), sharding=sharding) is step


def test_both_presets_are_the_mesh_strategy_with_its_one_order():
    for preset in (FSDP2Strategy, ParallelismStrategy):
        assert issubclass(preset, MeshStrategy)
        for hook in ("prepare_model", "parallelize", "apply_data_parallel", "no_sync",
                     "sync_in_backward", "join", "prepare_data_loader"):
            assert getattr(preset, hook) is getattr(MeshStrategy, hook), (preset, hook)
    assert not issubclass(ParallelismStrategy, FSDP2Strategy)


def test_every_model_goes_tp_then_checkpointing_then_compile_then_data_parallel(state,
                                                                                monkeypatch):
    import torch.distributed as dist
    from accel_parallel.fsdp.sharding import ensure_process_group
    from accel_parallel.mesh import strategy as nd

    steps: list[str] = []
    plugin = FullyShardedDataParallelPlugin(activation_checkpointing=True)
    try:
        ensure_process_group(state)
        strategy = FSDP2Strategy(state, plugin=plugin)
        monkeypatch.setattr(strategy, "parallelize", lambda m: steps.append("tp"))
        monkeypatch.setattr(nd, "apply_activation_checkpointing",
                            lambda modules: steps.append("checkpointing"))
        monkeypatch.setattr(strategy, "compile_model",
                            lambda m, in_place=False: steps.append("compile") or m)
        real = strategy.apply_data_parallel
        monkeypatch.setattr(strategy, "apply_data_parallel",
                            lambda m, t, **kw: steps.append(strategy.data_parallel.value)
                            or real(m, t, **kw))
        model = strategy.prepare_model(torch.nn.Linear(2, 2))
        assert steps == ["tp", "checkpointing", "compile", "fsdp"]
        assert hasattr(model, "unshard")  # fully_shard ran
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_the_mesh_strategy_says_whether_it_shards_parameters(state):
    """``shards_parameters`` (Accelerate's ``is_fsdp2``, issue 40.6): FSDP2 asked for shards;
    a mesh that shards nothing (one process, no FSDP plugin) does not, whatever it wraps."""
    import torch.distributed as dist
    from accel_parallel.fsdp.sharding import ensure_process_group

    try:
        ensure_process_group(state)
        fsdp = FSDP2Strategy(state, plugin=FullyShardedDataParallelPlugin())
        assert fsdp.shards_parameters and not fsdp.replicates_parameters
        plain = ParallelismStrategy(state, parallelism=ParallelismConfig())
        assert not plain.shards_parameters
        assert "fsdp" not in plain.plugins_in_use
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

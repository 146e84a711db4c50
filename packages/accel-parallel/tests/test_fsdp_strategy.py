"""The FSDP2 strategy's selection and refusals (training itself: tests/integration, 2 processes)."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import (
    FSDP2Strategy,
    FullyShardedDataParallelPlugin,
    StrategyConfig,
    select_strategy,
)
from accel_parallel.fsdp.strategy import CheckpointedForward
from accel_precision import BF16Precision, NoPrecision
from accel_state import ConfigurationError, MicroStep


def test_fsdp_is_chosen_by_its_plugin_and_runs_in_one_process(state):
    import torch.distributed as dist

    config = StrategyConfig(state=state, precision=NoPrecision(),
                            plugins={"fsdp": FullyShardedDataParallelPlugin()})
    assert FSDP2Strategy.accepts(config)
    assert not FSDP2Strategy.accepts(StrategyConfig(state=state, precision=NoPrecision()))
    assert not dist.is_initialized()
    try:
        strategy = select_strategy(config)  # FSDP outranks single and DDP
        assert isinstance(strategy, FSDP2Strategy)
        assert dist.is_initialized() and dist.get_world_size() == 1  # a group of its own
        model = strategy.prepare_model(torch.nn.Linear(3, 3))
        assert strategy.checkpoint_format([model]) == "sharded"
    finally:
        dist.destroy_process_group()


def test_fsdp_shards_a_model_on_a_one_process_group(state, gloo_group):
    strategy = FSDP2Strategy(state, precision=BF16Precision(device="cpu"),
                             plugin=FullyShardedDataParallelPlugin(activation_checkpointing=True,
                                                                   auto_wrap_policy="NO_WRAP"))
    model = strategy.prepare_model(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    assert strategy.checkpoint_format([model]) == "sharded"
    assert isinstance(model.forward, CheckpointedForward)
    out = model(torch.ones(2, 4))
    assert out.dtype == torch.float32  # bf16 compute, fp32 output (the precision's policy)
    out.sum().backward()
    accumulating = MicroStep()
    accumulating.sync = accumulating.reduce = False
    with strategy.accumulation_context([model], accumulating):
        assert id(model) in strategy._unsynced  # FSDP2 keeps the gradients unreduced
    assert not strategy._unsynced
    norm = strategy.clip_grad_norm_(model.parameters(), 1e3)
    assert type(norm) is torch.Tensor and norm > 0
    assert strategy.parallel_sizes == {"dp_replicate": 1, "dp_shard": 1}


def test_meta_models_need_weights_from_the_main_process(state, gloo_group):
    with torch.device("meta"):
        model = torch.nn.Linear(4, 4)
    plain = FSDP2Strategy(state, plugin=FullyShardedDataParallelPlugin(sync_module_states=False))
    with pytest.raises(ConfigurationError, match="sync_module_states=True"):
        plain.prepare_model(model)
    synced = FSDP2Strategy(state, plugin=FullyShardedDataParallelPlugin(
        cpu_ram_efficient_loading=True))
    with pytest.raises(ConfigurationError, match="main process's model is on the meta device"):
        synced.prepare_model(model)  # this one process is the main process

"""AcceleratorState: the shared view of the run's configuration Accelerate's libraries read."""

from __future__ import annotations

import pytest
import torch
from accel_state import ConfigurationError, DistributedType, PartialState

from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.state import AcceleratorState
from accel.utils import TorchDynamoPlugin


def test_the_accelerator_fills_the_shared_state():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", dynamo_backend="eager")
    state = AcceleratorState()
    assert accelerator.state.__dict__ is state.__dict__  # one shared state
    assert state.initialized and state.mixed_precision == "bf16"
    assert state.distributed_type is DistributedType.NO
    assert isinstance(state.dynamo_plugin, TorchDynamoPlugin)
    assert state.deepspeed_plugin is None and state.fsdp_plugin is None
    assert not state.is_fsdp2 and state.megatron_lm_plugin is None
    # the process state reads through
    assert state.device == torch.device("cpu") and state.num_processes == 1
    assert state.is_main_process and state.use_distributed is False
    with state.main_process_first():
        pass
    assert accelerator.is_main_process and accelerator.device.type == "cpu"
    with pytest.raises(ConfigurationError, match="mixed_precision='bf16'.*cannot change"):
        AcceleratorState(mixed_precision="fp16")
    # a new Accelerator refreshes it
    Accelerator(cpu=True)
    assert AcceleratorState().mixed_precision == "no" and AcceleratorState().dynamo_plugin is None


def test_fsdp_shows_in_the_state(gloo_group):
    plugin = FullyShardedDataParallelPlugin()
    Accelerator(cpu=True, fsdp_plugin=plugin)
    state = AcceleratorState()
    assert state.fsdp_plugin is plugin and state.is_fsdp2
    assert state.distributed_type is DistributedType.FSDP
    assert state.device_mesh is not None and state.device_mesh.size() == 1


def test_built_before_any_accelerator_it_reads_the_launch_environment(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    state = AcceleratorState(cpu=True)
    assert state.mixed_precision == "bf16" and state.distributed_type is DistributedType.FSDP
    assert PartialState().initialized


def test_reset_and_refused_plugins():
    AcceleratorState(cpu=True)
    AcceleratorState._reset_state()
    assert not AcceleratorState._shared_state and PartialState().initialized
    AcceleratorState(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    assert not PartialState._shared_state
    with pytest.raises(ConfigurationError, match="megatron_lm_plugin.*ParallelismConfig"):
        AcceleratorState(cpu=True, megatron_lm_plugin=object())
    with pytest.raises(ConfigurationError, match="No DeepSpeed plugin named 'x'"):
        AcceleratorState(cpu=True).get_deepspeed_plugin("x")


def test_free_memory_forgets_the_prepared_objects():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.step = 3
    model, optimizer = accelerator.free_memory(model, optimizer)
    assert model is None and optimizer is None
    assert accelerator._models == [] and accelerator._optimizers == [] and accelerator.step == 0
    assert accelerator.clear() == []


def test_destroy_process_group_works_after_a_reset(tmp_path):
    """Accelerate's test scripts call ``state.destroy_process_group()`` on a state whose
    shared attributes a ``_reset_state()`` cleared: the method is the class's own."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        state = Accelerator(cpu=True).state
        assert state.fork_launched is False
        AcceleratorState._reset_state()
        state.destroy_process_group()
        assert not dist.is_initialized()
        AcceleratorState().destroy_process_group()  # no group left: nothing to do
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

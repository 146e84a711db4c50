"""Single-process behaviour of the Accelerator facade (multi-process: tests/integration)."""

from __future__ import annotations

import pytest
import torch
from accel import (
    Accelerator,
    DistributedDataParallelKwargs,
    DistributedType,
    InitProcessGroupKwargs,
)
from accel.optimizer import AcceleratedOptimizer
from accel.scheduler import AcceleratedScheduler
from accel_state import ConfigurationError, GradientState
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _objects(n: int = 10, batch_size: int = 4):
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(n, 3), torch.randn(n, 1)), batch_size=batch_size)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return model, optimizer, loader, scheduler


def test_prepare_wraps_each_kind_and_keeps_order():
    accelerator = Accelerator(cpu=True)
    assert accelerator.device == torch.device("cpu")
    assert accelerator.distributed_type is DistributedType.NO
    assert (accelerator.num_processes, accelerator.process_index) == (1, 0)
    assert accelerator.is_main_process and accelerator.is_local_main_process
    model, optimizer, loader, scheduler = _objects()
    extra = {"not": "prepared"}
    # scheduler first, model last: prepare must still handle models before optimizers
    s, e, o, dl, m = accelerator.prepare(scheduler, extra, optimizer, loader, model)
    assert m is model and m._is_accelerate_prepared
    assert isinstance(o, AcceleratedOptimizer) and o.optimizer is optimizer
    assert isinstance(s, AcceleratedScheduler) and s.optimizers == [o]
    assert isinstance(dl, DataLoader) and len(dl) == len(loader)
    assert e is extra
    assert accelerator._models == [m] and accelerator._optimizers == [o]
    assert accelerator._schedulers == [s] and accelerator._dataloaders == [dl]
    assert accelerator.prepare(m) is m  # already prepared: unchanged
    assert accelerator.prepare(model) is model


def test_training_step_matches_raw_torch():
    torch.manual_seed(0)
    model, optimizer, loader, _ = _objects()
    raw_model = nn.Linear(3, 1)
    raw_model.load_state_dict(model.state_dict())
    raw_optimizer = torch.optim.SGD(raw_model.parameters(), lr=0.1)
    accelerator = Accelerator(cpu=True)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    for (x, y), (rx, ry) in zip(prepared, loader, strict=True):
        optimizer.zero_grad()
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        raw_optimizer.zero_grad()
        nn.functional.mse_loss(raw_model(rx), ry).backward()
        raw_optimizer.step()
    for p, q in zip(model.parameters(), raw_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_optimizer_skips_steps_while_not_syncing_gradients():
    accelerator = Accelerator(cpu=True)
    model, optimizer, *_ = _objects()
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.ones(1, 3)).sum().backward()
    before = model.weight.detach().clone()
    GradientState()._set_sync_gradients(False)
    optimizer.step()
    optimizer.zero_grad()
    assert torch.equal(model.weight, before) and model.weight.grad is not None
    GradientState()._set_sync_gradients(True)
    optimizer.step()
    assert not torch.equal(model.weight, before)
    optimizer.zero_grad()
    assert model.weight.grad is None
    assert not optimizer.step_was_skipped
    assert optimizer.param_groups is optimizer.optimizer.param_groups
    assert optimizer.state_dict()["param_groups"][0]["lr"] == 0.1


def test_optimizer_load_state_dict_and_pickle():
    import pickle

    accelerator = Accelerator(cpu=True)
    model, optimizer, *_ = _objects()
    _, optimizer = accelerator.prepare(model, optimizer)
    state = optimizer.state_dict()
    state["param_groups"][0]["lr"] = 0.01
    optimizer.load_state_dict(state)
    assert optimizer.param_groups[0]["lr"] == 0.01
    clone = pickle.loads(pickle.dumps(optimizer))
    assert clone.param_groups[0]["lr"] == 0.01


def test_scheduler_steps_only_with_the_optimizer():
    accelerator = Accelerator(cpu=True)
    model, optimizer, _, scheduler = _objects()
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr() == [0.05]
    GradientState()._set_sync_gradients(False)
    scheduler.step()
    assert scheduler.get_last_lr() == [0.05]
    GradientState()._set_sync_gradients(True)
    assert scheduler.state_dict()["last_epoch"] == 1


def test_unwrap_save_and_collectives_single_process(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(2, 2))
    assert accelerator.unwrap_model(model) is model
    accelerator.save(model.state_dict(), tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt", weights_only=True)
    assert torch.equal(loaded["weight"], model.weight)
    accelerator.save({"w": torch.ones(2)}, tmp_path / "w.safetensors", safe_serialization=True)
    t = torch.arange(3.0)
    assert torch.equal(accelerator.gather(t), t)
    assert torch.equal(accelerator.reduce(t), t)
    assert torch.equal(accelerator.pad_across_processes(t), t)
    accelerator.wait_for_everyone()
    with accelerator.split_between_processes([1, 2]) as share:
        assert share == [1, 2]


def test_device_placement_false_keeps_batches_and_model_where_they_are():
    accelerator = Accelerator(cpu=True, device_placement=False)
    model, _, loader, _ = _objects()
    model, loader = accelerator.prepare(model, loader)
    x, _ = next(iter(loader))
    assert x.device.type == "cpu"
    with pytest.raises(ValueError, match="one bool per object"):
        accelerator.prepare(model, loader, device_placement=[True])


def test_kwargs_handlers_are_validated():
    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=60),
                                                         DistributedDataParallelKwargs()])
    assert accelerator.strategy.name == "single"
    with pytest.raises(ConfigurationError, match="more than one InitProcessGroupKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(), InitProcessGroupKwargs()])
    with pytest.raises(ConfigurationError, match="unsupported object"):
        Accelerator(cpu=True, kwargs_handlers=[object()])
    with pytest.raises(ConfigurationError, match="not a known hook"):
        DistributedDataParallelKwargs(comm_hook="zip")


def test_accelerate_module_paths_reexport_the_same_objects():
    import accel
    import accel.logging
    import accel.state
    import accel.utils
    import accel.utils.operations
    import accel.utils.random
    import accel_state
    import accel_state.logging

    assert accel.utils.gather is accel_state.gather
    assert accel.utils.operations.send_to_device is accel_state.send_to_device
    assert accel.utils.random.set_seed is accel_state.set_seed
    assert accel.state.PartialState is accel_state.PartialState
    assert accel.logging.get_logger is accel_state.logging.get_logger
    assert accel.PartialState is accel_state.PartialState
    assert "Accelerator" in dir(accel)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        accel.Nope  # noqa: B018


def test_import_accel_is_lazy():
    import subprocess
    import sys

    code = ("import sys, accel; assert 'torch' not in sys.modules, 'import accel pulled torch'; "
            "from accel import Accelerator; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("value", ["no", "fp32", ""])
def test_full_precision_requests_are_accepted(monkeypatch, value):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", value)
    accelerator = Accelerator(cpu=True)
    assert accelerator.mixed_precision == "no" and not accelerator.native_amp


def test_mixed_precision_request_from_the_launcher_is_honoured_not_ignored(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    accelerator = Accelerator(cpu=True)
    assert accelerator.mixed_precision == "bf16" and accelerator.native_amp


def test_mixed_precision_in_code_wins_over_the_launcher_with_a_warning(monkeypatch):
    """Accelerate lets the argument win; accel does too, naming both values."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.warns(UserWarning, match=r"mixed_precision='no'\) overrides .*"
                                         r"ACCELERATE_MIXED_PRECISION=bf16"):
        accelerator = Accelerator(cpu=True, mixed_precision="no")
    assert accelerator.mixed_precision == "no" and accelerator.state.mixed_precision == "no"
    assert Accelerator(cpu=True).mixed_precision == "bf16"  # no argument: the launcher's


def test_scheduler_steps_once_per_data_parallel_replica_unless_batches_are_split():
    from accel import DataLoaderConfiguration

    model, optimizer, _, scheduler = _objects()
    replicated = AcceleratedScheduler(scheduler, [optimizer], num_processes=3)
    replicated.step()  # one optimizer step covers 3 replicas' batches
    assert scheduler.last_epoch == 3
    split = AcceleratedScheduler(scheduler, [optimizer], split_batches=True, num_processes=3)
    split.step()  # the batch itself was split: one step of the schedule
    assert scheduler.last_epoch == 4
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        split_batches=True))
    model, optimizer, _, scheduler = _objects()
    _, _, prepared = accelerator.prepare(model, optimizer, scheduler)
    assert prepared.split_batches is True  # the facade passes its data options on
    assert prepared.num_processes == accelerator.strategy.dp_size == 1


def test_fsdp_names_are_at_accelerates_module_paths():
    import accel
    import accel.utils
    import accel.utils.dataclasses
    import accel_parallel
    from accel_parallel.fsdp import plugin as fsdp_plugin

    plugin = accel_parallel.FullyShardedDataParallelPlugin
    assert accel.FullyShardedDataParallelPlugin is plugin
    assert accel.utils.FullyShardedDataParallelPlugin is plugin
    assert accel.utils.dataclasses.FullyShardedDataParallelPlugin is plugin
    for name in ("FSDP_SHARDING_STRATEGY", "FSDP_AUTO_WRAP_POLICY", "FSDP_BACKWARD_PREFETCH",
                 "FSDP_STATE_DICT_TYPE", "FSDP2_STATE_DICT_TYPE"):
        assert getattr(accel.utils, name) is getattr(fsdp_plugin, name)


def test_constructor_takes_accelerates_parameters_in_accelerates_order():
    import inspect

    parameters = inspect.signature(Accelerator.__init__).parameters
    names = [n for n, p in parameters.items()
             if n != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    # accel's own arguments are keyword only: a positional call means what it means in Accelerate
    assert [n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY] == ["strategy"]
    assert names == [
        "device_placement", "split_batches", "mixed_precision", "gradient_accumulation_steps",
        "cpu", "dataloader_config", "deepspeed_plugin", "fsdp_plugin", "torch_tp_plugin",
        "megatron_lm_plugin", "rng_types", "log_with", "project_dir", "project_config",
        "gradient_accumulation_plugin", "step_scheduler_with_optimizer", "kwargs_handlers",
        "dynamo_backend", "dynamo_plugin", "deepspeed_plugins", "parallelism_config"]
    from accel._data import UNSET

    accelerator = Accelerator(True, UNSET, "no", 2, True)  # positional, as in Accelerate
    assert accelerator.gradient_accumulation_steps == 2 and accelerator.device.type == "cpu"


def test_rng_types_reach_the_prepared_loaders():
    accelerator = Accelerator(cpu=True, rng_types=["torch", "generator"])
    assert accelerator.rng_types == ["torch", "generator"]
    loader = accelerator.prepare(torch.utils.data.DataLoader(list(range(8)), batch_size=2))
    assert loader.rng_types == ["torch"]  # no generator to synchronise: dropped, as Accelerate
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert Accelerator(cpu=True).rng_types is None

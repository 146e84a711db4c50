"""The Accelerator's cross-rank methods in 2 processes: check_trigger, trigger_sync_in_backward,
profile (one Chrome trace per rank), the device-map refusal and the topology properties.

Usage: facade_methods.py OUTPUT_DIR. Prints one "ok <check>" line per passed check and rank
(the test counts them, then reads the traces under OUTPUT_DIR/traces).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch
from accel import Accelerator, DistributedType, ProfileKwargs
from accel_state import ConfigurationError
from torch import nn


def _ok(check: str) -> None:
    """One write per line: both ranks share stdout."""
    sys.stdout.write(f"ok {check}\n")
    sys.stdout.flush()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def check_trigger(accelerator: Accelerator) -> None:
    assert accelerator.check_trigger() is False  # nobody set it
    if accelerator.process_index == 1:
        accelerator.set_trigger()  # one rank only
    assert accelerator.check_trigger() is True  # ... seen on every rank
    assert accelerator.check_trigger() is False  # and cleared by the check
    accelerator.set_trigger()  # every rank
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False
    _ok("check_trigger")


def check_trigger_sync_in_backward(accelerator: Accelerator) -> None:
    model = _model()
    reference = copy.deepcopy(model)  # the same weights, never synchronised
    model = accelerator.prepare(model)
    assert isinstance(model, nn.parallel.DistributedDataParallel)
    data = torch.Generator().manual_seed(10 + accelerator.process_index)  # differs per rank
    batch_a, batch_b = torch.randn(6, 4, generator=data), torch.randn(6, 4, generator=data)

    # without the trigger: forward and backward under no_sync stay local
    with accelerator.no_sync(model):
        accelerator.backward(model(batch_a).pow(2).mean())
    local = accelerator.gather(_grads(model)[None])
    assert not torch.allclose(local[0], local[1]), "no_sync synchronised the gradients"
    model.zero_grad()

    # Accelerate's documented pattern: both forwards under no_sync, the first backward local,
    # the second inside trigger_sync_in_backward: it reduces the accumulated gradients
    with accelerator.no_sync(model):
        loss_a = model(batch_a).pow(2).mean()
        loss_b = model(batch_b).pow(2).mean()
    accelerator.backward(loss_a)
    after_a = accelerator.gather(_grads(model)[None])
    assert not torch.allclose(after_a[0], after_a[1]), "the first backward synchronised"
    with accelerator.trigger_sync_in_backward(model):
        accelerator.backward(loss_b)
    synced = accelerator.gather(_grads(model)[None])
    torch.testing.assert_close(synced[0], synced[1])
    # ... to the mean over the ranks of each rank's local (a + b) gradients
    (reference(batch_a).pow(2).mean() + reference(batch_b).pow(2).mean()).backward()
    expected = accelerator.gather(_grads(reference)[None]).mean(dim=0)
    torch.testing.assert_close(synced[0], expected)
    # the flags are restored: a later no_sync forward/backward is local again
    model.zero_grad()
    with accelerator.no_sync(model):
        accelerator.backward(model(batch_a).pow(2).mean())
    again = accelerator.gather(_grads(model)[None])
    assert not torch.allclose(again[0], again[1]), "the trigger leaked out of its block"
    _ok("trigger_sync_in_backward")


def check_profile(accelerator: Accelerator, trace_dir: Path) -> None:
    assert accelerator.profile_handler is not None
    model = nn.Linear(16, 16)
    with accelerator.profile() as profiler:
        for _ in range(3):
            model(torch.randn(8, 16)).sum().backward()
    assert profiler.key_averages(), "nothing was profiled"
    # profile() waited for every rank: both traces are there now
    for rank in range(accelerator.num_processes):
        assert (trace_dir / f"profile_{rank}.json").is_file(), sorted(os.listdir(trace_dir))
    _ok("profile")


def check_device_map_refusal(accelerator: Accelerator) -> None:
    model = _model()
    model.hf_device_map = {"0": "cpu", "2": "disk"}  # as dispatch_model leaves it
    assert accelerator.verify_device_map(model) is True
    try:
        accelerator.prepare(model)
    except ConfigurationError as error:
        message = str(error)
        assert "hf_device_map" in message and "ACCEL_BYPASS_DEVICE_MAP" in message, message
        assert "--num_processes 1" in message, message
    else:
        raise AssertionError("prepare() took a dispatched model in a distributed run")
    os.environ["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"  # Accelerate's spelling: allowed
    try:
        prepared = accelerator.prepare(model)
    finally:
        del os.environ["ACCELERATE_BYPASS_DEVICE_MAP"]
    assert isinstance(prepared, nn.parallel.DistributedDataParallel)
    assert accelerator.verify_device_map(_model()) is False
    _ok("device_map refusal")


def check_topology(accelerator: Accelerator) -> None:
    assert accelerator.distributed_type is DistributedType.MULTI_CPU
    assert accelerator.use_distributed is True
    assert accelerator.multi_device is False  # CPU processes are not "devices" (Accelerate)
    assert accelerator.data_parallel_rank == accelerator.process_index
    assert accelerator.data_parallel_shard_rank == 0 and accelerator.tensor_parallel_rank == 0
    assert accelerator.should_save_model is True
    assert accelerator.torch_device_mesh is None and accelerator.is_fsdp2 is False
    _ok("topology")


def main() -> None:
    out = Path(sys.argv[1])
    trace_dir = out / "traces"
    accelerator = Accelerator(kwargs_handlers=[
        ProfileKwargs(activities=["cpu"], record_shapes=True, output_trace_dir=str(trace_dir))])
    assert accelerator.num_processes == 2, accelerator.num_processes
    check_trigger(accelerator)
    check_trigger_sync_in_backward(accelerator)
    check_profile(accelerator, trace_dir)
    check_device_map_refusal(accelerator)
    check_topology(accelerator)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()

"""``Strategy.sync_in_backward`` (``Accelerator.trigger_sync_in_backward``): a backward after a
``no_sync`` forward reduces anyway. On a 1-process gloo group: for DDP a communication hook
counts the buckets it all-reduces; FSDP2 keeps unreduced gradients off ``param.grad``."""

from __future__ import annotations

import torch
from accel_parallel import (
    DDPStrategy,
    FSDP2Strategy,
    FullyShardedDataParallelPlugin,
    SingleDeviceStrategy,
)


def _counted_ddp(strategy: DDPStrategy) -> tuple[torch.nn.Module, list[int]]:
    wrapped = strategy.prepare_model(torch.nn.Linear(4, 4))
    reduced: list[int] = []

    def count(state, bucket):  # DDP calls it for each bucket it all-reduces
        reduced.append(bucket.index())
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    wrapped.register_comm_hook(None, count)
    return wrapped, reduced


def test_ddp_backward_reduces_inside_sync_in_backward_only(state, gloo_group):
    strategy = DDPStrategy(state)
    wrapped, reduced = _counted_ddp(strategy)
    with strategy.no_sync(wrapped):
        wrapped(torch.ones(2, 4)).sum().backward()
    assert reduced == []  # the plain no_sync backward stays local
    with strategy.no_sync(wrapped):
        loss = wrapped(torch.ones(2, 4)).sum()
        with strategy.sync_in_backward(wrapped):
            assert wrapped.require_backward_grad_sync is True
            loss.backward()
        assert wrapped.require_backward_grad_sync is False  # restored: still in no_sync
    assert reduced == [0]
    wrapped(torch.ones(2, 4)).sum().backward()  # an ordinary step afterwards still reduces
    assert reduced == [0, 0]


def test_sync_in_backward_is_a_no_op_without_ddp(state):
    model = torch.nn.Linear(4, 4)
    with SingleDeviceStrategy(state).sync_in_backward(model):
        model(torch.ones(2, 4)).sum().backward()
    with DDPStrategy(state).sync_in_backward(model):  # not wrapped: nothing to arm
        model(torch.ones(2, 4)).sum().backward()
    assert model.weight.grad is not None


def test_fsdp2_backward_reduces_inside_sync_in_backward(state, gloo_group):
    strategy = FSDP2Strategy(state, plugin=FullyShardedDataParallelPlugin())
    model = strategy.prepare_model(torch.nn.Linear(4, 4))
    with strategy.no_sync(model):
        model(torch.ones(2, 4)).sum().backward()
    assert all(p.grad is None for p in model.parameters())  # kept unreduced, unsharded
    with strategy.no_sync(model):
        loss = model(torch.ones(2, 4)).sum()
        with strategy.sync_in_backward(model):
            loss.backward()
        model(torch.ones(2, 4)).sum().backward()  # deferred again after the block
    # the reduced gradient holds both accumulated backwards (2 rows of ones, twice), not the third
    torch.testing.assert_close(model.weight.grad.full_tensor(), torch.full((4, 4), 4.0))
    with strategy.sync_in_backward(model):  # outside no_sync: nothing to change
        model(torch.ones(2, 4)).sum().backward()
    torch.testing.assert_close(model.weight.grad.full_tensor(), torch.full((4, 4), 8.0))

"""Gradient synchronisation under ``no_sync``/``accumulate``, launched on 1 or N processes.

accel's own version of the check Accelerate bundles at this path (its tests start it with
``accelerate launch .../test_sync.py`` and no arguments). A reference model trains on the
gathered global batch in one process; the prepared (DDP) copy trains on the local shard.
Their gradients must be equal exactly at the steps where DDP all-reduces them and different
at the steps where it does not:

* the prepared loaders track the active dataloader and flag its last batch, nested too;
* one process: ``no_sync`` changes nothing;
* N processes: ``no_sync`` skips the all-reduce; several forwards under ``no_sync`` with the
  last backward under ``trigger_sync_in_backward`` sync only on that last one;
* ``accumulate`` with a ``GradientAccumulationPlugin(num_steps=2)`` syncs every second
  batch and on the loader's last batch, or every batch with ``sync_each_batch``, with and
  without ``split_batches``/``dispatch_batches``;
* with an optimizer and a scheduler, the prepared ones step only at the boundaries and the
  learning rates stay equal to a reference that steps its scheduler once per process.

Any failure raises (exit status non-zero); the main process prints a line per check.
"""

from __future__ import annotations

import itertools
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.optim import AdamW
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader

from accel.accelerator import Accelerator, DataLoaderConfiguration, GradientAccumulationPlugin
from accel.state import GradientState
from accel.test_utils.training import RegressionDataset, RegressionModel
from accel.utils import set_seed

BATCH = 16


@dataclass
class Pair:
    """A plain reference model and its prepared twin, with the prepared loader (and, when
    asked, both optimizers and schedulers)."""

    reference: torch.nn.Module
    prepared: torch.nn.Module
    loader: Any
    ref_opt: Any = None
    ref_sched: Any = None
    opt: Any = None
    sched: Any = None


def make_pair(accelerator: Accelerator, with_optimizer: bool = False) -> Pair:
    set_seed(42)
    reference = RegressionModel().to(accelerator.device)
    twin = deepcopy(reference)
    # seeded: every process holds the same data (Accelerate's draws it unseeded, so whether a
    # local gradient lands within rtol of the global one was left to chance)
    loader = DataLoader(RegressionDataset(length=80, seed=42), batch_size=BATCH)
    if not with_optimizer:
        twin, loader = accelerator.prepare(twin, loader)
        return Pair(reference, twin, loader)
    ref_opt = AdamW(reference.parameters(), lr=1e-3)
    opt = AdamW(twin.parameters(), lr=1e-3)
    ref_sched = LambdaLR(ref_opt, lr_lambda=lambda epoch: epoch ** 0.65)
    sched = LambdaLR(opt, lr_lambda=lambda epoch: epoch ** 0.65)
    twin, opt, sched, loader = accelerator.prepare(twin, opt, sched, loader)
    return Pair(reference, twin, loader, ref_opt, ref_sched, opt, sched)


def forward_backward(model, x, y, accelerator: Accelerator, *, plain: bool = False) -> None:
    """One forward and backward; ``plain`` is the reference's: a bare ``backward`` of the loss
    divided by the accumulation steps, as ``accelerator.backward`` divides it."""
    model.train()
    out = model(x)
    loss = F.mse_loss(out, y.to(out.device))
    if plain:
        (loss / accelerator.gradient_accumulation_steps).backward()
    else:
        accelerator.backward(loss)


def global_batch(accelerator: Accelerator, x, y):
    """The batch every process saw this step, in rank order (the reference's input)."""
    gx, gy = accelerator.gather((x, y))
    return gx.to(accelerator.device), gy.to(accelerator.device)


def expect_grads(a: torch.nn.Module, b: torch.nn.Module, in_sync: bool, where: str,
                 **tolerance: float) -> None:
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        if not pa.requires_grad:
            continue
        same = torch.allclose(pa.grad, pb.grad, **tolerance)
        if same != in_sync:
            state = "differ" if in_sync else "are equal"
            raise AssertionError(f"{where}: gradients of {name!r} {state} but should "
                                 f"{'match' if in_sync else 'differ'}: reference {pa.grad}, "
                                 f"prepared {pb.grad}")


def reshuffle(x: torch.Tensor, iteration: int) -> torch.Tensor:
    torch.manual_seed(1337 + iteration)
    return x[torch.randperm(len(x))]


def check_no_sync(accelerator: Accelerator) -> None:
    """Alternate ``no_sync`` and synced backwards on one repeated batch."""
    pair = make_pair(accelerator)
    x, y = next(iter(pair.loader)).values()
    distributed = accelerator.num_processes > 1
    for iteration in range(3):
        forward_backward(pair.reference, *global_batch(accelerator, x, y), accelerator)
        skip = iteration % 2 == 0
        if skip:
            with accelerator.no_sync(pair.prepared):
                forward_backward(pair.prepared, x, y, accelerator)
        else:
            forward_backward(pair.prepared, x, y, accelerator)
        # on one process no_sync has nothing to skip: always in sync
        expect_grads(pair.reference, pair.prepared, not (skip and distributed),
                     f"no_sync, iteration {iteration}")
        x = reshuffle(x, iteration)


def check_multiple_forwards(accelerator: Accelerator) -> None:
    """Three forwards under ``no_sync``, then three backwards: only the last, under
    ``trigger_sync_in_backward``, all-reduces."""
    pair = make_pair(accelerator)
    losses = []
    for _ in range(3):
        x, y = next(iter(pair.loader)).values()
        forward_backward(pair.reference, *global_batch(accelerator, x, y), accelerator)
        with accelerator.no_sync(pair.prepared):
            out = pair.prepared(x)
            losses.append(F.mse_loss(out, y.to(out.device)))
    for i, loss in enumerate(losses):
        last = i == len(losses) - 1
        if last:
            with accelerator.trigger_sync_in_backward(pair.prepared):
                accelerator.backward(loss)
        else:
            accelerator.backward(loss)
        expect_grads(pair.reference, pair.prepared, last, f"multiple forwards, backward {i}")


def _accumulating_accelerator(split: bool, dispatch: bool, each: bool) -> Accelerator:
    return Accelerator(
        dataloader_config=DataLoaderConfiguration(split_batches=split, dispatch_batches=dispatch),
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2,
                                                                sync_each_batch=each))


def check_accumulate(split: bool, dispatch: bool, each: bool) -> None:
    accelerator = _accumulating_accelerator(split, dispatch, each)
    pair = make_pair(accelerator)
    for iteration, batch in enumerate(pair.loader):
        x, y = batch.values()
        forward_backward(pair.reference, *global_batch(accelerator, x, y), accelerator,
                         plain=True)
        with accelerator.accumulate(pair.prepared):
            forward_backward(pair.prepared, x, y, accelerator)
            assert accelerator.sync_gradients == _boundary(iteration, len(pair.loader)), (
                f"sync_gradients is {accelerator.sync_gradients} at batch {iteration}")
        in_sync = each or _boundary(iteration, len(pair.loader))
        expect_grads(pair.reference, pair.prepared, in_sync,
                     f"accumulate(split={split}, dispatch={dispatch}, sync_each_batch={each}), "
                     f"batch {iteration}")
    GradientState._reset_state()


def _boundary(iteration: int, length: int) -> bool:
    """Whether batch ``iteration`` ends an accumulation of 2 (or the loader)."""
    return (iteration + 1) % 2 == 0 or iteration + 1 == length


def check_accumulate_with_optimizer(split: bool = False, dispatch: bool = False,
                                    each: bool = False) -> None:
    accelerator = _accumulating_accelerator(split, dispatch, each)
    pair = make_pair(accelerator, with_optimizer=True)
    boundaries = 0
    for iteration, batch in enumerate(pair.loader):
        x, y = batch.values()
        pair.reference.train()
        forward_backward(pair.reference, *global_batch(accelerator, x, y), accelerator,
                         plain=True)
        pair.ref_opt.step()
        boundary = _boundary(iteration, len(pair.loader))
        if boundary:
            # a prepared scheduler steps once per process unless batches are split
            for _ in range(1 if split else accelerator.num_processes):
                pair.ref_sched.step()
        with accelerator.accumulate(pair.prepared):
            forward_backward(pair.prepared, x, y, accelerator)
            pair.opt.step()
            pair.sched.step()
        ref_lr, lr = pair.ref_opt.param_groups[0]["lr"], pair.opt.param_groups[0]["lr"]
        assert ref_lr == lr, f"batch {iteration}: learning rate {lr}, reference {ref_lr}"
        boundaries += boundary
        taken = _adam_steps(pair.opt.optimizer)
        assert taken == boundaries, (
            f"batch {iteration}: the prepared optimizer took {taken} steps, expected one per "
            f"accumulation boundary ({boundaries})")
        if accelerator.num_processes > 1:
            expect_grads(pair.reference, pair.prepared, boundary or each,
                         f"accumulate with optimizer (split={split}, dispatch={dispatch}, "
                         f"sync_each_batch={each}), batch {iteration}", rtol=1e-2)
        if boundary:
            pair.ref_opt.zero_grad()
        pair.opt.zero_grad()
    GradientState._reset_state()


def _adam_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many real steps an Adam-family optimizer has taken (its per-parameter counter)."""
    steps = {int(state["step"]) for state in optimizer.state.values()}
    assert len(steps) <= 1, f"parameters disagree on the step count: {steps}"
    return steps.pop() if steps else 0


def check_dataloader_end() -> None:
    """``active_dataloader`` follows the innermost running loader; ``end_of_dataloader``
    is set on each loader's last batch only."""
    accelerator = Accelerator()
    outer, inner = accelerator.prepare(DataLoader(RegressionDataset(length=80), batch_size=16),
                                       DataLoader(RegressionDataset(length=96), batch_size=16))
    gradient_state = accelerator.gradient_state
    assert gradient_state.active_dataloader is None
    for i, _ in enumerate(outer):
        assert gradient_state.active_dataloader is outer
        assert gradient_state.end_of_dataloader == (i == len(outer) - 1), f"outer batch {i}"
        if i == 1:
            for j, _ in enumerate(inner):
                assert gradient_state.active_dataloader is inner
                assert gradient_state.end_of_dataloader == (j == len(inner) - 1), (
                    f"inner batch {j}")
            assert gradient_state.active_dataloader is outer, "outer loader not restored"
    assert gradient_state.active_dataloader is None


def main() -> None:
    accelerator = Accelerator()
    say = accelerator.print
    say("**Test `accumulate` gradient accumulation with dataloader break**")
    check_dataloader_end()
    if accelerator.num_processes == 1:
        say("**Test NOOP `no_sync` context manager**")
        check_no_sync(accelerator)
    else:
        say("**Test Distributed `no_sync` context manager**")
        check_no_sync(accelerator)
        say("**Test Distributed `no_sync` context manager with multiple forwards**")
        check_multiple_forwards(accelerator)
        for split, dispatch, each in itertools.product((True, False), repeat=3):
            say(f"**Test `accumulate` gradient accumulation, `split_batches={split}` and "
                f"`dispatch_batches={dispatch}` and `sync_each_batch={each}`**")
            check_accumulate(split, dispatch, each)
    say("**Test `accumulate` gradient accumulation with optimizer and scheduler, "
        "`split_batches=False`, `dispatch_batches=False`, `sync_each_batch=False`**")
    check_accumulate_with_optimizer()
    if accelerator.num_processes > 1:
        for split, dispatch, each in itertools.product((True, False), repeat=3):
            if split or dispatch or each:
                say("**Test `accumulate` gradient accumulation with optimizer and scheduler, "
                    f"`split_batches={split}` and `dispatch_batches={dispatch}` and "
                    f"`sync_each_batch={each}`**")
                check_accumulate_with_optimizer(split, dispatch, each)
    accelerator.state.destroy_process_group()


if __name__ == "__main__":
    main()

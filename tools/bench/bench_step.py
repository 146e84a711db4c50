"""Training-step overhead of ``Accelerator`` against the same raw PyTorch loop, same run.

One sample = one epoch (data loading, forward, backward, optimizer step) of a small
MLP. Raw and accel epochs alternate; the ratio of medians is reported. Targets: at most
1.03 on one process, 1.01 on two (the DDP loop). One process:

    uv run python tools/bench/bench_step.py

Two processes (raw = DistributedDataParallel + DistributedSampler):

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_step.py

``--accumulate N`` measures gradient accumulation instead: the accel loop runs every batch
inside ``accelerator.accumulate(model)`` with ``gradient_accumulation_steps=N``, the raw
loop divides the loss by N, skips DDP's all-reduce with ``no_sync()`` on the first N-1
micro-steps and steps every N batches. ``--width`` sets the MLP's hidden width.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist
from common import epoch_timer, import_accelerate, interleaved, make_mlp, report
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from accel import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch per process")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--accumulate", type=int, default=1, help="micro-steps per optimizer step")
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--aa", action="store_true",
                        help="also time a second copy of the raw loop (A/A: how far two "
                             "identical loops differ in this run)")
    parser.add_argument("--device", choices=["cpu", "auto"], default="cpu",
                        help="auto: the accelerator when present (tools/gpu_check.sh uses it)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=args.device == "cpu",
                              gradient_accumulation_steps=args.accumulate)
    device = accelerator.device
    world = accelerator.num_processes
    n = args.steps * args.batch_size * world
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))

    def raw_loop() -> Any:
        raw_model = make_mlp(args.width).to(device)
        raw_sampler = None
        if world > 1:
            raw_model = nn.parallel.DistributedDataParallel(
                raw_model, device_ids=None if device.type == "cpu" else [device])
            raw_sampler = DistributedSampler(data, shuffle=False)
        raw_loader = DataLoader(data, batch_size=args.batch_size, sampler=raw_sampler)
        raw_opt = torch.optim.SGD(raw_model.parameters(), lr=0.01)
        return raw_timer(raw_model, raw_opt, raw_loader, args.accumulate, device)

    candidates = {"raw torch": raw_loop()}
    if args.aa:  # the same raw loop on a second model: the noise floor of this run
        candidates["raw torch (A/A)"] = raw_loop()
    model = make_mlp(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = accelerator.prepare(
        model, opt, DataLoader(data, batch_size=args.batch_size, shuffle=False))
    candidates["accel"] = library_timer(accelerator, model, opt, loader, args.accumulate)
    # Accelerate's column, one process only (under accel launch it would need its own group)
    accelerate = import_accelerate() if world == 1 and args.device == "cpu" else None
    if accelerate is not None:
        theirs = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=args.accumulate)
        their_model = make_mlp(args.width)
        their_opt = torch.optim.SGD(their_model.parameters(), lr=0.01)
        candidates["accelerate"] = library_timer(theirs, *theirs.prepare(
            their_model, their_opt, DataLoader(data, batch_size=args.batch_size)),
            args.accumulate)

    for run in candidates.values():
        run()  # warm-up
    samples = interleaved(candidates, args.repeats)
    per_step = {k: [v / args.steps * 1e3 for v in vs] for k, vs in samples.items()}
    if accelerator.is_main_process:
        kind = "step" if args.accumulate == 1 else f"accumulate({args.accumulate}) micro-step"
        for name in candidates:
            if name != "raw torch":
                report(f"{kind} ({world} process{'es' if world > 1 else ''}, {device.type}, "
                       f"w{args.width} b{args.batch_size})", "raw torch", name,
                       per_step, unit="ms", target=1.03 if world == 1 else 1.01,
                       extra={"processes": world, "batch_size": args.batch_size,
                              "steps": args.steps, "width": args.width,
                              "accumulate": args.accumulate})
    if world > 1:
        dist.barrier()


def raw_timer(model, optimizer, loader, steps, device):  # noqa: ANN001, ANN201
    """The hand-written loop: a plain step, or accumulation over ``steps`` micro-steps."""
    if steps > 1:
        return raw_accumulation_timer(model, optimizer, loader, steps, device)
    return epoch_timer(model, optimizer, loader, lambda loss: loss.backward(), device=device)


def library_timer(accelerator, model, optimizer, loader, steps):  # noqa: ANN001, ANN201
    """The documented loop of accel or Accelerate (same API): plain, or in ``accumulate``."""
    if steps > 1:
        return accel_accumulation_timer(accelerator, model, optimizer, loader)
    return epoch_timer(model, optimizer, loader, accelerator.backward)


def raw_accumulation_timer(model, optimizer, loader, steps, device):  # noqa: ANN001, ANN201
    """The hand-written accumulation loop: loss / steps, ``no_sync`` off the boundary."""
    loss_fn = nn.CrossEntropyLoss()
    ddp = isinstance(model, nn.parallel.DistributedDataParallel)
    move = device.type != "cpu"

    def run() -> float:
        start = time.perf_counter()
        last = len(loader) - 1
        for i, (x, y) in enumerate(loader):
            if move:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            boundary = (i + 1) % steps == 0 or i == last
            with model.no_sync() if ddp and not boundary else contextlib.nullcontext():
                (loss_fn(model(x), y) / steps).backward()
            if boundary:
                optimizer.step()
                optimizer.zero_grad()
        return time.perf_counter() - start

    return run


def accel_accumulation_timer(accelerator, model, optimizer, loader):  # noqa: ANN001, ANN201
    """Accelerate's documented accumulation loop (run by accel or by Accelerate)."""
    loss_fn = nn.CrossEntropyLoss()

    def run() -> float:
        start = time.perf_counter()
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(loss_fn(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
        return time.perf_counter() - start

    return run


if __name__ == "__main__":
    main()

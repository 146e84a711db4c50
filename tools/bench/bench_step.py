"""Training-step overhead of ``Accelerator`` against the same raw PyTorch loop, same run.

One sample = one epoch (data loading, forward, backward, optimizer step) of a small
MLP. Raw and accel epochs alternate; the ratio of medians is reported. Target: at most
1.02 (2% slower). One process:

    uv run python tools/bench/bench_step.py

Two processes (raw = DistributedDataParallel + DistributedSampler):

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_step.py
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from common import epoch_timer, interleaved, make_mlp, report
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from accel import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch per process")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--device", choices=["cpu", "auto"], default="cpu",
                        help="auto: the accelerator when present (tools/gpu_check.sh uses it)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=args.device == "cpu")
    device = accelerator.device
    world = accelerator.num_processes
    n = args.steps * args.batch_size * world
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))

    raw_model = make_mlp().to(device)
    raw_sampler = None
    if world > 1:
        raw_model = nn.parallel.DistributedDataParallel(
            raw_model, device_ids=None if device.type == "cpu" else [device])
        raw_sampler = DistributedSampler(data, shuffle=False)
    raw_loader = DataLoader(data, batch_size=args.batch_size, sampler=raw_sampler)
    raw_opt = torch.optim.SGD(raw_model.parameters(), lr=0.01)
    raw = epoch_timer(raw_model, raw_opt, raw_loader, lambda loss: loss.backward(), device=device)

    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = accelerator.prepare(
        model, opt, DataLoader(data, batch_size=args.batch_size, shuffle=False))
    acc = epoch_timer(model, opt, loader, accelerator.backward)

    raw(), acc()  # warm-up
    samples = interleaved({"raw torch": raw, "accel": acc}, args.repeats)
    per_step = {k: [v / args.steps * 1e3 for v in vs] for k, vs in samples.items()}
    if accelerator.is_main_process:
        report(f"step ({world} process{'es' if world > 1 else ''}, {device.type})", "raw torch", "accel",
               per_step, unit="ms", target=1.02,
               extra={"processes": world, "batch_size": args.batch_size, "steps": args.steps})
    if world > 1:
        dist.barrier()


if __name__ == "__main__":
    main()

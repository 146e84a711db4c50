"""Batches per second of a prepared DataLoader against the plain one, same run.

Tiny batches (4 integers, default collate, no workers) so that the loader's own per-batch
work is all that is measured. One epoch per sample, plain and prepared alternating; the
report is the ratio of median epoch times (accel / plain: <= 1.053 means at least 0.95x the
plain loader's batches per second). One process:

    uv run python tools/bench/bench_data.py

Two processes (plain = DataLoader with DistributedSampler; prepared = BatchSamplerShard):

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_data.py
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from accel_data import prepare_data_loader
from accel_state import PartialState
from common import import_accelerate, interleaved, report
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def epoch_timer(loader: DataLoader, set_epoch) -> callable:
    """A function that runs one epoch of ``loader`` and returns its wall time."""
    epoch = [0]

    def run() -> float:
        set_epoch(epoch[0])
        epoch[0] += 1
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=2000, help="batches per epoch per process")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    state = PartialState(cpu=True)
    world = state.num_processes
    n = args.batches * args.batch_size * world
    data = TensorDataset(torch.arange(n))

    if world > 1:
        sampler = DistributedSampler(data, shuffle=args.shuffle, seed=0)
        plain = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
        plain_epoch = sampler.set_epoch
    else:
        plain = DataLoader(data, batch_size=args.batch_size, shuffle=args.shuffle)
        plain_epoch = lambda epoch: None  # noqa: E731 - a no-op hook
    prepared = prepare_data_loader(DataLoader(data, batch_size=args.batch_size,
                                              shuffle=args.shuffle), data_seed=0)
    candidates = {"plain": epoch_timer(plain, plain_epoch),
                  "accel": epoch_timer(prepared, prepared.set_epoch)}
    accelerate = import_accelerate() if world == 1 else None  # its own process group otherwise
    if accelerate is not None:
        theirs = accelerate.Accelerator(cpu=True).prepare_data_loader(
            DataLoader(data, batch_size=args.batch_size, shuffle=args.shuffle))
        candidates["accelerate"] = epoch_timer(theirs, theirs.set_epoch)
    for run in candidates.values():
        run()  # warm-up
    samples = interleaved(candidates, args.repeats)
    if state.is_main_process:
        per_batch = {k: [v / args.batches * 1e6 for v in vs] for k, vs in samples.items()}
        rate = {k: sorted(args.batches / v for v in vs)[len(vs) // 2]
                for k, vs in samples.items()}
        for name in candidates:
            if name == "plain":
                continue
            report(f"dataloader ({world} process{'es' if world > 1 else ''}, "
                   f"batch {args.batch_size})", "plain", name, per_batch, unit="us",
                   target=round(1 / 0.95, 3),
                   extra={"processes": world, "plain_batches_per_s": round(rate["plain"]),
                          f"{name}_batches_per_s": round(rate[name]),
                          "throughput_ratio": round(rate[name] / rate["plain"], 3)})
    if world > 1:
        dist.barrier()


if __name__ == "__main__":
    main()

"""``accelerator.gather`` and ``gather_for_metrics`` against raw ``torch.distributed``, same
run, 2 processes (gloo on CPU). Target: at most 1.05 for the medium tensor.

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_gather.py

The raw floor is what a user writes: ``dist.all_gather`` into a list of tensors, then
``torch.cat`` along the first dimension. accel also checks the tensors' shapes across ranks
only when asked to pad, moves the result to the device and, for ``gather_for_metrics``, trims
the duplicated samples at the end of an evaluation (nothing to trim here: every call is a
middle batch). Each sample times ``--calls`` gathers; the two loops alternate.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from accel import Accelerator
from common import report


def bench_shape(accelerator: Accelerator, args: argparse.Namespace, label: str,
                tensor: torch.Tensor) -> None:
    world = accelerator.num_processes

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(args.calls):
            parts = [torch.empty_like(tensor) for _ in range(world)]
            dist.all_gather(parts, tensor)
            torch.cat(parts)
        return time.perf_counter() - start

    def gather() -> float:
        start = time.perf_counter()
        for _ in range(args.calls):
            accelerator.gather(tensor)
        return time.perf_counter() - start

    def for_metrics() -> float:
        start = time.perf_counter()
        for _ in range(args.calls):
            accelerator.gather_for_metrics(tensor)
        return time.perf_counter() - start

    candidates = {"raw all_gather + cat": raw, "accel gather": gather,
                  "accel gather_for_metrics": for_metrics}
    for run in candidates.values():
        run()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in list(candidates) if i % 2 == 0 else list(reversed(candidates)):
            dist.barrier()
            samples[name].append(candidates[name]() / args.calls * 1e6)
    if accelerator.is_main_process:
        for name in list(candidates)[1:]:
            report(f"{name.removeprefix('accel ')}, {label}, {world} processes, cpu",
                   "raw all_gather + cat", name, samples, unit="us", target=1.05,
                   extra={"processes": world, "shape": list(tensor.shape)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    for label, shape in (("small 8 floats", (1, 8)), ("medium 256x256", (256, 256))):
        bench_shape(accelerator, args, label, torch.randn(*shape))
    dist.barrier()


if __name__ == "__main__":
    main()

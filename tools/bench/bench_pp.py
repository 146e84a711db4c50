"""Pipeline-parallel training step through ``Accelerator`` against the same hand-written
``torch.distributed.pipelining`` loop, same run, 2 processes. Target: at most 1.02.

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_pp.py [--schedule gpipe]

Both split the same model (an input layer, ``--depth`` residual MLP blocks, a head) in two
at the middle block, run the same schedule with the same number of micro-batches and the
same per-micro-batch loss (the mean divided by the number of micro-batches, gradients not
rescaled by the schedule), and step SGD. The raw loop is what a user writes without accel:
a ``PipelineStage`` per rank, ``schedule.step(x)`` on the first rank and
``schedule.step(target=y, losses=losses)`` on the last, the loss summed there. accel also
broadcasts that loss to every rank (so ``gather``/``reduce`` and logging see it) and checks
it in ``backward``. Epochs alternate; the ratio of medians is reported.
"""

from __future__ import annotations

import argparse
import inspect
import time

import torch
import torch.distributed as dist
from accel import Accelerator, ParallelismConfig
from accel_parallel.pipeline import PipelineParallelConfig
from common import report
from torch import nn
from torch.distributed import pipelining


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def make_model(width: int, depth: int) -> Net:
    torch.manual_seed(0)
    return Net(width, depth)


SCHEDULES = {"gpipe": pipelining.ScheduleGPipe, "1f1b": pipelining.Schedule1F1B}


def raw_pipeline(args: argparse.Namespace, rank: int) -> tuple[object, torch.optim.Optimizer]:
    """The hand-written loop's stage, schedule and optimizer."""
    full = make_model(args.width, args.depth)
    half = args.depth // 2
    if rank == 0:
        stage_module = nn.Sequential(full.inp, *full.layers[:half])
    else:
        stage_module = nn.Sequential(*full.layers[half:], full.head)
    n_micro = args.microbatches

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target) / n_micro

    stage = pipelining.PipelineStage(stage_module, rank, 2, torch.device("cpu"))
    cls = SCHEDULES[args.schedule]
    extra = {"scale_grads": False} if "scale_grads" in inspect.signature(cls).parameters else {}
    schedule = cls(stage, n_micro, loss_fn=loss_fn, **extra)
    return schedule, torch.optim.SGD(stage_module.parameters(), lr=0.01, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", default="1f1b", choices=sorted(SCHEDULES))
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)

    def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target)

    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(
        pp_size=2, pp_handler=PipelineParallelConfig(
            schedule=args.schedule, num_microbatches=args.microbatches, loss_fn=mse,
            split_points=[f"layers.{args.depth // 2}"])))
    model = make_model(args.width, args.depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank = accelerator.process_index
    raw_schedule, raw_optimizer = raw_pipeline(args, rank)

    generator = torch.Generator().manual_seed(0)  # one pipeline: the same batches everywhere
    batches = [(torch.randn(args.batch_size, args.width, generator=generator),
                torch.randn(args.batch_size, args.width, generator=generator))
               for _ in range(args.steps)]

    def run_accel() -> float:
        start = time.perf_counter()
        for x, y in batches:
            loss = model(x, target=y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        return time.perf_counter() - start

    def run_raw() -> float:
        start = time.perf_counter()
        for x, y in batches:
            if rank == 0:
                raw_schedule.step(x)
            else:
                losses: list[torch.Tensor] = []
                raw_schedule.step(target=y, losses=losses)
                torch.stack([part.detach() for part in losses]).sum()
            raw_optimizer.step()
            raw_optimizer.zero_grad()
        return time.perf_counter() - start

    candidates = {"raw torch.distributed.pipelining": run_raw, "accel": run_accel}
    for run in candidates.values():
        run()  # warm-up (shape inference on the first step)
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            dist.barrier()
            samples[name].append(candidates[name]() / args.steps * 1e3)
    if accelerator.is_main_process:
        report(f"PP step (2 stages, {args.schedule}, {args.microbatches} micro-batches, cpu, "
               f"w{args.width} d{args.depth} b{args.batch_size})",
               "raw torch.distributed.pipelining", "accel", samples, unit="ms", target=1.02,
               extra={"processes": 2, "schedule": args.schedule, "width": args.width,
                      "depth": args.depth, "microbatches": args.microbatches})
    dist.barrier()


if __name__ == "__main__":
    main()

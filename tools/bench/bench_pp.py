"""Pipeline-parallel training step through ``Accelerator`` against the same hand-written
``torch.distributed.pipelining`` loop, same run, 2 processes. Target: at most 1.02.

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_pp.py \
        [--schedule gpipe|1f1b|interleaved_1f1b]

Both split the same model (an input layer, ``--depth`` residual MLP blocks, a head) in two
at the middle block (interleaved 1F1B: in four, two stages per rank in loop order), run
the same schedule with the same number of micro-batches and the
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


SCHEDULES = {"gpipe": pipelining.ScheduleGPipe, "1f1b": pipelining.Schedule1F1B,
             "interleaved_1f1b": pipelining.ScheduleInterleaved1F1B}


def stage_count(schedule: str) -> int:
    """Stages in all: one per rank, two per rank (loop order) for interleaved 1F1B."""
    return 4 if schedule == "interleaved_1f1b" else 2


def split_points(args: argparse.Namespace) -> list[str]:
    """The blocks that start stages 1.. (the same split for accel and the raw loop)."""
    stages = stage_count(args.schedule)
    return [f"layers.{k * args.depth // stages}" for k in range(1, stages)]


def raw_pipeline(args: argparse.Namespace, rank: int) -> tuple[object, torch.optim.Optimizer]:
    """The hand-written loop's stages, schedule and optimizer."""
    full = make_model(args.width, args.depth)
    stages = stage_count(args.schedule)
    bounds = [0, *(int(p.split(".")[1]) for p in split_points(args)), args.depth]
    modules = []
    for index in range(rank, stages, 2):  # rank 0: stages 0 (and 2), rank 1: 1 (and 3)
        parts = list(full.layers[bounds[index]:bounds[index + 1]])
        parts = [full.inp, *parts] if index == 0 else parts
        parts = [*parts, full.head] if index == stages - 1 else parts
        modules.append((index, nn.Sequential(*parts)))
    n_micro = args.microbatches

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target) / n_micro

    built = [pipelining.PipelineStage(m, i, stages, torch.device("cpu")) for i, m in modules]
    cls = SCHEDULES[args.schedule]
    extra = {"scale_grads": False} if "scale_grads" in inspect.signature(cls).parameters else {}
    schedule = cls(built if stages > 2 else built[0], n_micro, loss_fn=loss_fn, **extra)
    params = [p for _, m in modules for p in m.parameters()]
    return schedule, torch.optim.SGD(params, lr=0.01, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", default="1f1b", choices=sorted(SCHEDULES))
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the raw loop plus accel's loss broadcast, and accel "
                        "without it (where the ratio's time goes)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target)

    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(
        pp_size=2, pp_handler=PipelineParallelConfig(
            schedule=args.schedule, num_microbatches=args.microbatches, loss_fn=mse,
            split_points=split_points(args))))
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

    def run_raw(share: bool = False) -> float:
        start = time.perf_counter()
        for x, y in batches:
            if rank == 0:
                raw_schedule.step(x)
                loss = torch.zeros(())
            else:
                losses: list[torch.Tensor] = []
                raw_schedule.step(target=y, losses=losses)
                loss = torch.stack([part.detach() for part in losses]).sum()
            if share:  # what accel adds: the last stage's loss on every rank
                dist.broadcast(loss, src=1)
            raw_optimizer.step()
            raw_optimizer.zero_grad()
        return time.perf_counter() - start

    def run_accel_unshared() -> float:
        model._share_loss = lambda loss: loss if loss is not None else torch.zeros(())
        try:
            return run_accel()
        finally:
            del model._share_loss

    candidates = {"raw torch.distributed.pipelining": run_raw, "accel": run_accel}
    if args.breakdown:
        candidates["raw + loss broadcast"] = lambda: run_raw(share=True)
        candidates["accel without loss broadcast"] = run_accel_unshared
    for run in candidates.values():
        run()  # warm-up (shape inference on the first step)
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            dist.barrier()
            samples[name].append(candidates[name]() / args.steps * 1e3)
    if accelerator.is_main_process:
        report(f"PP step ({stage_count(args.schedule)} stages, {args.schedule}, "
               f"{args.microbatches} micro-batches, cpu, "
               f"w{args.width} d{args.depth} b{args.batch_size})",
               "raw torch.distributed.pipelining", "accel", samples, unit="ms", target=1.02,
               extra={"processes": 2, "schedule": args.schedule, "width": args.width,
                      "depth": args.depth, "microbatches": args.microbatches})
        for name in list(candidates)[2:]:
            report(f"  breakdown ({args.schedule})", "raw torch.distributed.pipelining",
                   name, samples, unit="ms")
    dist.barrier()


if __name__ == "__main__":
    main()

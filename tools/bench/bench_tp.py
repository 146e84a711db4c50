"""Tensor-parallel training step through ``Accelerator`` against the same hand-written
``parallelize_module`` loop, same run, 2 processes. Target: at most 1.02 (2% slower).

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_tp.py

Both models get the same plan (each block's ``up`` column-wise, ``down`` row-wise over a
2-process ``tp`` mesh) and train on the same batches with clipping; epochs alternate and the
ratio of medians is reported. The raw loop clips with torch's ``clip_grad_norm_`` (every
gradient lives on the one ``tp`` mesh here, where torch's works too); accel's clipping takes
the local norms in one fused op and one all-reduce per mesh, which is faster than torch's
per-DTensor path, so ``--no-clip`` measures the step without it (backward and optimizer only).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from accel import Accelerator, ParallelismConfig, PartialState
from accel.utils import TorchTensorParallelConfig
from common import report
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def make_model(width: int, depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(Block(width) for _ in range(depth)))


def timer(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list,
          backward: object, clip: object) -> object:
    def run() -> float:
        start = time.perf_counter()
        for x, y in batches:
            optimizer.zero_grad()
            backward(nn.functional.mse_loss(model(x), y))
            if clip is not None:
                clip(model.parameters(), 1.0)
            optimizer.step()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-clip", action="store_true",
                        help="leave clipping out: only backward and the optimizer step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    world = PartialState(cpu=True).num_processes  # tp over every process

    plan = {f"{i}.up": "colwise" for i in range(args.depth)}
    plan.update({f"{i}.down": "rowwise" for i in range(args.depth)})
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(
        tp_size=world, tp_handler=TorchTensorParallelConfig(tp_plan=plan)))
    model = make_model(args.width, args.depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    raw_model = make_model(args.width, args.depth)
    parallelize_module(raw_model, mesh, {k: (ColwiseParallel() if v == "colwise"
                                             else RowwiseParallel()) for k, v in plan.items()})
    raw_optimizer = torch.optim.SGD(raw_model.parameters(), lr=0.01, momentum=0.9)

    generator = torch.Generator().manual_seed(0)  # one TP group: the same batches everywhere
    batches = [(torch.randn(args.batch_size, args.width, generator=generator),
                torch.randn(args.batch_size, args.width, generator=generator))
               for _ in range(args.steps)]
    candidates = {
        "raw parallelize_module": timer(raw_model, raw_optimizer, batches,
                                        lambda loss: loss.backward(),
                                        None if args.no_clip else torch.nn.utils.clip_grad_norm_),
        "accel": timer(model, optimizer, batches, accelerator.backward,
                       None if args.no_clip else accelerator.clip_grad_norm_)}
    for run in candidates.values():
        run()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            samples[name].append(candidates[name]() / args.steps * 1e3)
    if accelerator.is_main_process:
        report(f"TP step ({world} processes, cpu, w{args.width} d{args.depth} "
               f"b{args.batch_size}{', no clipping' if args.no_clip else ''})",
               "raw parallelize_module", "accel", samples, unit="ms",
               target=1.02, extra={"processes": world, "width": args.width,
                                   "depth": args.depth})
    dist.barrier()


if __name__ == "__main__":
    main()

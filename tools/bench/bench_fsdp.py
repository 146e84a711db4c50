"""FSDP2 training step through ``Accelerator`` against the same hand-written ``fully_shard``
loop, same run, 2 processes. Target: at most 1.02 (2% slower).

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_fsdp.py

Both models are sharded the same way (each block its own FSDP unit, then the root) and
trained on the same batches; epochs alternate and the ratio of medians is reported. The
bytes of parameters, gradients and SGD momentum each rank holds are reported for FSDP2
against DDP's full replica.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from common import report
from torch import nn
from torch.distributed.fsdp import fully_shard

from accel import Accelerator, FullyShardedDataParallelPlugin


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x))


def make_model(width: int, depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), *(Block(width) for _ in range(depth)),
                         nn.Linear(width, 10))


def local_bytes(model: nn.Module) -> int:
    """Bytes of this rank's parameter shards (a DTensor's local part, else the tensor)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def timer(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list,
          backward: object) -> object:
    loss_fn = nn.CrossEntropyLoss()

    def run() -> float:
        start = time.perf_counter()
        for x, y in batches:
            optimizer.zero_grad()
            backward(loss_fn(model(x), y))
            optimizer.step()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
        auto_wrap_policy=lambda module: isinstance(module, Block)))
    model = make_model(args.width, args.depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)

    raw_model = make_model(args.width, args.depth)
    for block in [m for m in raw_model if isinstance(m, Block)]:
        fully_shard(block)
    fully_shard(raw_model)
    raw_optimizer = torch.optim.SGD(raw_model.parameters(), lr=0.01, momentum=0.9)

    generator = torch.Generator().manual_seed(dist.get_rank())
    batches = [(torch.randn(args.batch_size, 64, generator=generator),
                torch.randint(0, 10, (args.batch_size,), generator=generator))
               for _ in range(args.steps)]
    candidates = {"raw fully_shard": timer(raw_model, raw_optimizer, batches,
                                           lambda loss: loss.backward()),
                  "accel": timer(model, optimizer, batches, accelerator.backward)}
    for run in candidates.values():
        run()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            samples[name].append(candidates[name]() / args.steps * 1e3)

    sharded = local_bytes(model)
    full = sum(p.numel() * p.element_size() for p in make_model(args.width, args.depth)
               .parameters())
    if accelerator.is_main_process:
        world = accelerator.num_processes
        report(f"FSDP2 step ({world} processes, cpu, w{args.width} d{args.depth} "
               f"b{args.batch_size})", "raw fully_shard", "accel", samples, unit="ms",
               target=1.02, extra={"processes": world, "width": args.width,
                                   "depth": args.depth,
                                   "param_bytes_per_rank_fsdp": sharded,
                                   "param_bytes_per_rank_ddp": full})
        print(f"parameters + gradients + momentum per rank: FSDP2 {3 * sharded / 2**20:.1f} MiB, "
              f"DDP {3 * full / 2**20:.1f} MiB")
    dist.barrier()


if __name__ == "__main__":
    main()

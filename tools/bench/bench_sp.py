"""Ulysses sequence-parallel training step through ``Accelerator`` against the same hand-written
torch loop, same run, 2 processes. Target: at most 1.02 (2% slower).

    uv run accel launch --cpu --num_processes 2 tools/bench/bench_sp.py

Both train one small decoder on the same sequence shards: accel's with
``ParallelismConfig(sp_size=2)`` (the prepared loader's shards, the core attention wrapped
through ``_sp_plan``, FSDP2 over the ``sp`` ranks, ``sequence_parallel_mean``); the raw loop
with its own ``all_to_all_single`` autograd function around the same attention, ``fully_shard``
over a 1-D mesh of the two processes, batches cut by hand and the same loss written out.
Epochs alternate and the ratio of medians is reported.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accel import Accelerator, ParallelismConfig, PartialState
from accel_parallel import sequence_parallel_mean
from common import report
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader


class Core(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.core = Core()
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj(self.core(q, k, v).transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    _sp_plan = ["blocks.*.core"]

    def __init__(self, vocab: int, seq: int, width: int, heads: int, depth: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# -- the hand-written Ulysses ---------------------------------------------------------------
def exchange(x: torch.Tensor, scatter: int, gather: int) -> torch.Tensor:
    parts = torch.stack(x.chunk(dist.get_world_size(), dim=scatter)).contiguous()
    out = torch.empty_like(parts)
    dist.all_to_all_single(out, parts)
    return torch.cat(out.unbind(0), dim=gather)


class Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scatter, gather):  # noqa: ANN001, ANN205
        ctx.dims = scatter, gather
        return exchange(x, scatter, gather)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        return exchange(grad.contiguous(), ctx.dims[1], ctx.dims[0]), None, None


def raw_ulysses(model: Decoder) -> None:
    for block in model.blocks:
        inner = block.core.forward

        def forward(q, k, v, inner=inner):  # noqa: ANN001, ANN202
            q, k, v = (Exchange.apply(t, 1, 2) for t in (q, k, v))
            return Exchange.apply(inner(q, k, v), 2, 1)

        block.core.forward = forward


def raw_mean(loss_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    total = count.float()
    dist.all_reduce(total)
    value = loss_sum.detach().clone()
    dist.all_reduce(value)
    share = loss_sum * dist.get_world_size() / total
    return share + (value / total - share).detach()


def timer(model, optimizer, batches, backward, mean) -> object:  # noqa: ANN001
    def run() -> float:
        start = time.perf_counter()
        for batch in batches:
            optimizer.zero_grad()
            logits = model(batch["input_ids"], batch["position_ids"])
            labels = batch["labels"]
            loss_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                       ignore_index=-100, reduction="sum")
            backward(mean(loss_sum, (labels != -100).sum()))
            optimizer.step()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    world = PartialState(cpu=True).num_processes
    vocab = 256

    def make_model() -> Decoder:
        torch.manual_seed(0)
        return Decoder(vocab, args.seq, args.width, args.heads, args.depth)

    generator = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(args.steps * args.batch_size):
        ids = torch.randint(0, vocab, (args.seq + 1,), generator=generator)
        samples.append({"input_ids": ids[:-1], "labels": ids[1:]})

    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=world))
    sp_group = accelerator.torch_device_mesh["sp"].get_group()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(samples, batch_size=args.batch_size))
    accel_batches = list(loader)

    raw_model = make_model()
    raw_ulysses(raw_model)
    fully_shard(raw_model, mesh=init_device_mesh("cpu", (world,), mesh_dim_names=("sp",)),
                reshard_after_forward=False)
    raw_optimizer = torch.optim.SGD(raw_model.parameters(), lr=0.01, momentum=0.9)
    rank, chunk = dist.get_rank(), args.seq // world
    cut = slice(rank * chunk, (rank + 1) * chunk)
    raw_batches = []
    for i in range(args.steps):
        rows = samples[i * args.batch_size:(i + 1) * args.batch_size]
        ids = torch.stack([r["input_ids"] for r in rows])
        raw_batches.append({"input_ids": ids[:, cut], "labels": torch.stack(
            [r["labels"] for r in rows])[:, cut], "position_ids": torch.arange(
                args.seq).expand(len(rows), -1)[:, cut]})

    candidates = {
        "raw all_to_all + fully_shard": timer(raw_model, raw_optimizer, raw_batches,
                                              lambda loss: loss.backward(), raw_mean),
        "accel": timer(model, optimizer, accel_batches, accelerator.backward,
                       lambda s, c: sequence_parallel_mean(s, c, sp_group))}
    for run in candidates.values():
        run()  # warm-up
    samples_ms: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            samples_ms[name].append(candidates[name]() / args.steps * 1e3)
    if accelerator.is_main_process:
        report(f"SP step ({world} processes, cpu, seq{args.seq} w{args.width} h{args.heads} "
               f"d{args.depth} b{args.batch_size})", "raw all_to_all + fully_shard", "accel",
               samples_ms, unit="ms", target=1.02,
               extra={"processes": world, "seq": args.seq, "width": args.width})
    dist.barrier()


if __name__ == "__main__":
    main()

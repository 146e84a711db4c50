"""Ulysses sequence parallelism: a small decoder whose sequences are split over processes.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/sequence_parallel.py

``ParallelismConfig(sp_size=2)`` gives both processes the same batches and keeps, on each,
half of every sequence: the prepared loader cuts ``input_ids`` / ``labels`` to this rank's
shard and adds the global ``position_ids``. Around the core attention (named by the model's
``_sp_plan``) an all-to-all trades the sequence split for a split over heads, so attention
still sees the whole sequence. ``sequence_parallel_mean`` turns each rank's summed token loss
into the mean over whole sequences (shards count different tokens when labels are -100).
With 4 processes, ``--dp_shard 2`` adds FSDP2 over the other dimension.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from accel import Accelerator, ParallelismConfig
from accel_parallel import sequence_parallel_mean
from torch import nn
from torch.utils.data import DataLoader

VOCAB, SEQ = 32, 64


class CoreAttention(nn.Module):
    """softmax(q k^T) v, causal, over (batch, heads, seq, head_dim): what Ulysses wraps."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.core = CoreAttention()
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj(self.core(q, k, v).transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    _sp_plan = ["blocks.*.core"]  # the modules that compute attention from (q, k, v)

    def __init__(self, width: int = 64, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, width), nn.Embedding(SEQ, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Linear(width, VOCAB)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions(position_ids)  # global positions
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_data(num_samples: int = 64, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Sequences counting up from a random start; the label of a token is the next one, and
    the first quarter of each sequence (a "prompt") is not scored."""
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for start in torch.randint(0, VOCAB, (num_samples,), generator=generator):
        ids = (start + torch.arange(SEQ + 1)) % VOCAB
        labels = ids[1:].clone()
        labels[: SEQ // 4] = -100
        samples.append({"input_ids": ids[:-1], "labels": labels})
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dp_shard", type=int, default=1, help="FSDP2 size (processes / 2)")
    args = parser.parse_args()

    accelerator = Accelerator(parallelism_config=ParallelismConfig(
        sp_size=2, dp_shard_size=args.dp_shard))
    sp_group = accelerator.torch_device_mesh["sp"].get_group()
    torch.manual_seed(0)
    model = Decoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(make_data(), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    sp_rank = accelerator.torch_device_mesh["sp"].get_local_rank()
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for batch in loader:
            logits = model(batch["input_ids"], batch["position_ids"])
            labels = batch["labels"]
            loss_sum = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                       ignore_index=-100, reduction="sum")
            loss = sequence_parallel_mean(loss_sum, (labels != -100).sum(), sp_group)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total, batches = total + loss.item(), batches + 1
        accelerator.print(f"epoch {epoch} loss {total / batches:.4f}")
    print(f"sp rank {sp_rank}: shard of {tuple(batch['input_ids'].shape)} tokens, positions "
          f"{batch['position_ids'][0, 0].item()}..{batch['position_ids'][0, -1].item()}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

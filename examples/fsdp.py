"""FSDP2: the quick start's training loop with its model sharded over the processes.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/fsdp.py

The loop is Accelerate's FSDP workflow unchanged; only the ``FullyShardedDataParallelPlugin``
differs from the quick start. Each ``Block`` becomes its own FSDP unit (the model names it
in ``_no_split_modules``, as transformers models do), parameters are computed in bf16 and
kept in fp32, and the checkpoint is saved shard by shard and loaded back.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

import torch
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.utils import broadcast_object_list
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, width: int = 64, depth: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.Sequential(*(Block(width) for _ in range(depth)))
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.inp(x)))


def make_data(num_samples: int = 512, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, 8, generator=generator)
    w = 0.3 * torch.randn(8, 1, generator=generator)
    return TensorDataset(x, torch.sin(x @ w))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    fsdp_plugin = FullyShardedDataParallelPlugin(
        sharding_strategy="FULL_SHARD", auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    accelerator = Accelerator(mixed_precision="bf16", fsdp_plugin=fsdp_plugin)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    dataloader = DataLoader(make_data(), batch_size=args.batch_size, shuffle=True)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)

    for epoch in range(args.epochs):
        total, batches = torch.zeros((), device=accelerator.device), 0
        for x, y in dataloader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.detach()
            batches += 1
        epoch_loss = accelerator.reduce(total / batches, reduction="mean")
        accelerator.print(f"epoch {epoch}: loss {epoch_loss.item():.4f}")

    accelerator.print(f"strategy {accelerator.strategy.name}, "
                      f"distributed type {accelerator.distributed_type.value}")
    # a sharded checkpoint: every process writes its own shards into one directory
    box = [tempfile.mkdtemp() if accelerator.is_main_process else None]
    broadcast_object_list(box)
    path = accelerator.save_state(f"{box[0]}/checkpoint")
    accelerator.load_state(path)
    accelerator.print(f"sharded checkpoint saved and loaded: {path}")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(box[0])
    accelerator.end_training()


if __name__ == "__main__":
    main()

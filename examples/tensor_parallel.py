"""Tensor parallelism: the quick start's training loop with each block split over processes.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/tensor_parallel.py

The model carries a tensor-parallel plan in the form transformers models do (``_tp_plan``:
module-name patterns, ``*`` for a layer index, mapped to "colwise" / "rowwise"), and
``ParallelismConfig(tp_size=2)`` splits every ``up``/``down`` pair over the two processes.
Both processes form one tensor-parallel group, so they read the same batches; the loop is
unchanged. With 4 processes, ``ParallelismConfig(dp_shard_size=2, tp_size=2)`` adds FSDP2
over the other dimension (``--dp_shard 2``).
"""

from __future__ import annotations

import argparse

import torch
from accel import Accelerator, ParallelismConfig
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class Net(nn.Module):
    # up: output features split over the tp ranks; down: input features split, outputs summed
    _tp_plan = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}

    def __init__(self, width: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def make_data(num_samples: int = 256, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, 8, generator=generator)
    return TensorDataset(x, (x[:, :4].sum(dim=1, keepdim=True) > 0).float())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dp_shard", type=int, default=1, help="FSDP2 size (processes / 2)")
    args = parser.parse_args()

    accelerator = Accelerator(parallelism_config=ParallelismConfig(
        tp_size=2, dp_shard_size=args.dp_shard))
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(make_data(), batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.print(f"mesh {accelerator.torch_device_mesh}, tp rank "
                      f"{accelerator.tensor_parallel_rank}, data-parallel replicas "
                      f"{accelerator.strategy.dp_size}")
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for x, y in loader:
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            total, batches = total + loss.item(), batches + 1
        accelerator.print(f"epoch {epoch} loss {total / batches:.4f}")
    weights = accelerator.get_state_dict(model)  # gathered: full tensors on the main process
    if accelerator.is_main_process:
        print(f"full weight of blocks.0.up: {tuple(weights['blocks.0.up.weight'].shape)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Quick start: a plain PyTorch training loop made distributed with four accel lines.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/quickstart.py

or on one process with ``python examples/quickstart.py``. The lines marked ``# accel``
are the only changes to an ordinary PyTorch script: there is no ``.to(device)``
anywhere, and the same file runs unchanged on a GPU or on many machines.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator  # accel


def make_data(num_samples: int = 512, seed: int = 0) -> TensorDataset:
    """A small learnable problem: y = sin(x @ w) plus noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, 8, generator=generator)
    w = 0.3 * torch.randn(8, 1, generator=generator)
    y = torch.sin(x @ w) + 0.05 * torch.randn(num_samples, 1, generator=generator)
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()

    torch.manual_seed(0)  # same initial weights on every process
    accelerator = Accelerator()  # accel
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dataloader = DataLoader(make_data(), batch_size=args.batch_size, shuffle=True)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)  # accel

    for epoch in range(args.epochs):
        model.train()
        total, batches = torch.zeros((), device=accelerator.device), 0
        for x, y in dataloader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)  # accel
            optimizer.step()
            total += loss.detach()
            batches += 1
        epoch_loss = accelerator.reduce(total / batches, reduction="mean")
        accelerator.print(f"epoch {epoch}: loss {epoch_loss.item():.4f}")

    # Every process must hold the same weights after data-parallel training.
    flat = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
    replicas = accelerator.gather(flat.unsqueeze(0))
    in_sync = bool(torch.equal(replicas.min(0).values, replicas.max(0).values))
    accelerator.print(f"parameters identical on all {accelerator.num_processes} processes: {in_sync}")
    if not in_sync:
        raise SystemExit("parameters diverged across processes")


if __name__ == "__main__":
    main()

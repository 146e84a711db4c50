"""Gradient accumulation: a large batch from several small ones, checked against the large one.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/gradient_accumulation.py

``Accelerator(gradient_accumulation_steps=4)`` and ``with accelerator.accumulate(model):``
around each batch: the optimizer steps only on every 4th batch (and on the last batch of
the loader), the loss is divided by 4 in ``backward``, and under DDP the
gradient all-reduce is skipped on the other batches (``no_sync``). With 2 processes and
batches of 8, one optimizer step therefore sees 2 x 4 x 8 = 64 samples. The script trains
a plain PyTorch copy of the model on batches of 64 alongside and prints whether both end
with the same weights.
"""

from __future__ import annotations

import argparse
import copy

import torch
from accel import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accumulation-steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    big_batch_model = copy.deepcopy(model)

    accelerator = Accelerator(gradient_accumulation_steps=args.accumulation_steps)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(data, batch_size=args.batch_size)  # unshuffled: comparable below
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    optimizer_steps = 0
    for x_batch, y_batch in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(x_batch), y_batch)
            accelerator.backward(loss)
            optimizer.step()  # a no-op except on every accumulation_steps-th batch
            optimizer.zero_grad()
            optimizer_steps += int(accelerator.sync_gradients)
    accelerator.print(f"batches per process: {len(loader)}, optimizer steps: {optimizer_steps}")

    # The same training in plain PyTorch, on batches as large as one accumulated step.
    big = args.batch_size * args.accumulation_steps * accelerator.num_processes
    big_optimizer = torch.optim.SGD(big_batch_model.parameters(), lr=0.1)
    for start in range(0, len(data), big):
        xb, yb = data[start:start + big]
        big_optimizer.zero_grad()
        nn.functional.mse_loss(big_batch_model(xb), yb).backward()
        big_optimizer.step()

    trained = accelerator.unwrap_model(model).state_dict()
    same = all(torch.allclose(trained[k].cpu(), v, rtol=1e-4, atol=1e-6)
               for k, v in big_batch_model.state_dict().items())
    accelerator.print(f"same weights as {len(data) // big} steps on batches of {big}: {same}")
    if not same:
        raise SystemExit("accumulated training differs from the large-batch training")


if __name__ == "__main__":
    main()

"""Mixed precision: the quick start's loop with the forward pass in bfloat16, on a CPU too.

Run it on one process (bf16 autocast works on any recent CPU):

    uv run python examples/mixed_precision.py

or on 2 CPU processes, with the precision chosen by the launcher instead of the code:

    uv run accel launch --num_processes 2 --cpu --mixed_precision bf16 \
        examples/mixed_precision.py --precision-from-launcher

``Accelerator(mixed_precision="bf16")`` runs every prepared model's forward under
``torch.autocast(bfloat16)``: matrix products compute in bf16, the weights, the gradients
and the optimizer state stay fp32, and the model's outputs come back as fp32. The script
prints the dtype seen inside the model, the dtype of its output and of its weights, and the
loss of an fp32 twin trained on the same batches, to show bf16 trains as well. The same
file uses ``"fp16"`` (with loss scaling) or ``"fp8"`` on a GPU; naming a precision both in
the code and on the launcher with different values is an error, never a silent choice.
"""

from __future__ import annotations

import argparse
import copy

import torch
from accel import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(num_samples: int = 256, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, 16, generator=generator)
    w = 0.3 * torch.randn(16, 1, generator=generator)
    return TensorDataset(x, torch.sin(x @ w))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--precision-from-launcher", action="store_true",
                        help="leave mixed_precision to `accel launch --mixed_precision`")
    args = parser.parse_args()

    torch.manual_seed(0)
    accelerator = Accelerator() if args.precision_from_launcher \
        else Accelerator(mixed_precision="bf16")
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))
    reference = copy.deepcopy(model)  # trained in fp32 on the same batches, for comparison
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    loader = DataLoader(make_data(), batch_size=32)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    reference.to(accelerator.device)

    inner: list[torch.dtype] = []
    first_linear = accelerator.unwrap_model(model)[0]
    first_linear.register_forward_hook(lambda module, inputs, output: inner.append(output.dtype))

    for epoch in range(args.epochs):
        total = torch.zeros(2, device=accelerator.device)
        for x, y in loader:
            optimizer.zero_grad()
            out = model(x)
            loss = nn.functional.mse_loss(out, y)
            accelerator.backward(loss)
            optimizer.step()

            ref_optimizer.zero_grad()
            ref_loss = nn.functional.mse_loss(reference(x), y)
            ref_loss.backward()
            ref_optimizer.step()
            total += torch.stack([loss.detach(), ref_loss.detach()])
        mean = accelerator.reduce(total / len(loader), reduction="mean")
        accelerator.print(f"epoch {epoch}: loss {mean[0].item():.4f} "
                          f"(fp32 twin {mean[1].item():.4f})")

    weights = {p.dtype for p in accelerator.unwrap_model(model).parameters()}
    accelerator.print(f"mixed precision: {accelerator.mixed_precision}")
    accelerator.print(f"dtype inside the forward: {inner[-1]}")
    accelerator.print(f"dtype of the output: {out.dtype}")
    accelerator.print(f"dtype of the weights: {', '.join(sorted(map(str, weights)))}")


if __name__ == "__main__":
    main()

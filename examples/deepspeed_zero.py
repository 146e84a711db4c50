"""DeepSpeed ZeRO: the quick start's training loop, with the model trained by DeepSpeed.

(Not named ``deepspeed.py``: run as a script, that name would shadow the package.)

Run it on 2 CPU processes (DeepSpeed installed: ``pip install "accel[deepspeed]"``):

    uv run accel launch --num_processes 2 --cpu examples/deepspeed_zero.py

The loop is unchanged from DDP; only ``deepspeed_plugin=`` differs. ZeRO-2 with 2
accumulated batches per step; the micro batch size, the train batch size and bf16 are
"auto" and filled from the data loader and the Accelerator. The checkpoint is DeepSpeed's
own, committed atomically with a manifest of every file (its ``.pt`` files are read back
with ``torch.load(weights_only=True)`` and an allow-list of DeepSpeed's classes).
``--zero_stage 3`` partitions the parameters too; ``ACCEL_DEEPSPEED_SHM_COMM=0`` skips the
one-time compile of DeepSpeed's shared-memory all-reduce on CPU.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

import torch
from accel import Accelerator
from accel.utils import DeepSpeedPlugin, broadcast_object_list
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero_stage", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    plugin = DeepSpeedPlugin(zero_stage=args.zero_stage, gradient_accumulation_steps=2,
                             gradient_clipping=1.0)
    accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=plugin)
    torch.manual_seed(0)
    x = torch.randn(512, 16)
    y = (x[:, :4].sum(dim=1, keepdim=True) > 0).float()
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.print("resolved DeepSpeed config:", accelerator.strategy.configs["default"])

    for epoch in range(args.epochs):
        for xb, yb in loader:
            with accelerator.accumulate(model):
                # float32 batches as with DDP: accel casts them for the bf16 engine
                loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)  # = gradient_clipping
                optimizer.step()
                optimizer.zero_grad()
        accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")

    # DeepSpeed's checkpoint inside accel's commit protocol, on every process
    holder = [tempfile.mkdtemp() if accelerator.is_main_process else None]
    broadcast_object_list(holder)
    path = accelerator.save_state(f"{holder[0]}/checkpoint")
    accelerator.load_state(path)
    accelerator.save_model(model, f"{holder[0]}/weights")  # full weights (ZeRO-3: gathered)
    accelerator.wait_for_everyone()
    accelerator.print("saved and reloaded", path)
    if accelerator.is_main_process:
        shutil.rmtree(holder[0])
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Checkpointing and exact resume: stop mid-epoch, start again, continue bit for bit.

Run it on 2 CPU processes, in three commands:

    # train to step 6 (the middle of an epoch), save a checkpoint and stop
    uv run accel launch --num_processes 2 --cpu examples/checkpointing.py --stop
    # new processes: load the checkpoint and train steps 7 to 12
    uv run accel launch --num_processes 2 --cpu examples/checkpointing.py --resume
    # for comparison, the 12 steps without a stop (it saves at step 6 too, and goes on)
    uv run accel launch --num_processes 2 --cpu examples/checkpointing.py

Steps 7 to 12 print the same losses in the resumed run as in the uninterrupted one, and
both end with the same weights digest. ``accelerator.save_state(dir)`` (on every process)
writes the model, the optimizer, the scheduler, the position of the shuffled dataloader,
every rank's RNG states (the dropout masks continue) and the objects registered with
``register_for_checkpointing`` (here the step counter); the folder is committed atomically
with a manifest of sizes and digests, and ``load_state(dir)`` checks every byte before
loading anything. ``DataLoaderConfiguration(exact_resume=True)`` asks ``load_state`` for the
loader's mid-epoch position too (without it, as in Accelerate, the epoch starts again). ``--checkpoint-dir`` picks the folder (default: ``runs/checkpointing``).
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

import torch
from accel import Accelerator, DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Progress:
    """The training position, saved with the checkpoint (``register_for_checkpointing``)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-dir", default="runs/checkpointing")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--save-at", type=int, default=6)
    parser.add_argument("--stop", action="store_true", help="stop right after the save")
    parser.add_argument("--resume", action="store_true", help="start from the checkpoint")
    args = parser.parse_args()

    torch.manual_seed(0)
    # exact_resume: load_state also restores the loader's place in the epoch, so the
    # resumed run continues with the next unseen batch (Accelerate's default, and accel's,
    # starts the epoch again and leaves skipping the seen batches to the script)
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(exact_resume=True))
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=generator)
    data = TensorDataset(x, torch.tanh(x.sum(dim=1, keepdim=True)))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.1,
                                                  total_iters=args.steps)
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)

    if args.resume:
        accelerator.load_state(args.checkpoint_dir)
        accelerator.print(f"resumed at step {progress.step} from {args.checkpoint_dir}")

    while progress.step < args.steps:
        for xb, yb in loader:  # after a resume: the rest of the interrupted epoch first
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            progress.step += 1
            mean = accelerator.reduce(loss.detach(), reduction="mean")
            accelerator.print(f"step {progress.step} loss {mean.item():.6f}")
            if progress.step == args.save_at and not args.resume:
                path = accelerator.save_state(args.checkpoint_dir)
                accelerator.print(f"saved step {progress.step} to {path}")
                if args.stop:
                    return
            if progress.step == args.steps:
                break
    accelerator.print(f"weights digest: {digest(accelerator.unwrap_model(model))}")


if __name__ == "__main__":
    main()

"""`accel launch --max_restarts` resumes; SIGTERM saves a last checkpoint (one script).

Trains 10 steps of a small model with dropout and AdamW, saving a verified checkpoint
every 3 steps (automatic naming), and calls ``load_state()`` at start when one exists,
so a restarted worker group continues from the newest verified checkpoint.

``--crash``: rank 1 dies at step 7 on the first attempt only (TORCHELASTIC_RESTART_COUNT
0): the restarted group resumes from step 6's checkpoint. ``--reference DIR``: the first
attempt first trains the same 10 steps uninterrupted into DIR (its own Accelerator and
checkpoints), the run the resumed one must equal: no launch of its own. ``--sigterm``:
``handle_preemption()``; rank 0 writes ``ready`` after step 3 and the loop slows down
until the test's SIGTERM to the launcher is seen, then ``save_state_if_preempted()``
writes the last checkpoint and the run stops.
Rank 0 writes ``final.json`` (parameters as float.hex, attempts, resumed step).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from accel import Accelerator
from accel.checkpointing import ProjectConfiguration
from accel_state import env
from torch import nn

STEPS, CRASH_AT, SAVE_EVERY = 10, 7, 3


class Progress:
    """The step counter, checkpointed with the rest."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 6, generator=gen)
    return x, x.sum(dim=1, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--sigterm", action="store_true")
    parser.add_argument("--reference", type=Path, default=None)
    opts = parser.parse_args()
    attempt = env.TORCHELASTIC_RESTART_COUNT.get_int(0)
    if opts.reference is not None and attempt == 0:
        train(opts.reference, argparse.Namespace(crash=False, sigterm=False), attempt)
    train(Path(opts.out), opts, attempt)


def train(out: Path, opts: argparse.Namespace, attempt: int) -> None:
    config = ProjectConfiguration(project_dir=str(out), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    resumed_from = None
    if config.checkpoints_dir is not None and config.checkpoints_dir.is_dir() and any(
            config.checkpoints_dir.iterdir()):
        accelerator.load_state()  # the newest verified checkpoint
        resumed_from = progress.step
    if opts.sigterm:
        accelerator.handle_preemption()
    preempted_at = None
    while progress.step < STEPS:
        step = progress.step
        if opts.crash and attempt == 0 and rank == 1 and step == CRASH_AT:
            os._exit(3)  # dies mid-run, before this step's checkpoint
        x, y = batch(step, rank)
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        progress.step += 1
        if opts.sigterm:
            if rank == 0 and progress.step == 3:
                (out / "ready").write_text("1")
            if progress.step >= 3:
                time.sleep(0.5)  # leave time for the test's SIGTERM
            if accelerator.save_state_if_preempted():
                preempted_at = progress.step
                break
        if progress.step % SAVE_EVERY == 0 and not opts.sigterm:
            accelerator.save_state()
    if rank == 0:
        params = [v.hex() for p in accelerator.unwrap_model(model).parameters()
                  for v in p.detach().flatten().tolist()]
        (out / "final.json").write_text(json.dumps({
            "params": params, "attempt": attempt, "resumed_from": resumed_from,
            "steps": progress.step, "preempted_at": preempted_at}))
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""transformers' Trainer on 2 processes through `accel launch`: gradient accumulation, a
checkpoint halfway, then a fresh Trainer resumes from it (one launch for both).

Usage: accel launch --cpu --num_processes 2 trainer_two_processes.py OUT_DIR
Rank 0 prints one line ``HF2 <json>`` with what the test checks.
"""

from __future__ import annotations

import json
import os
import sys

import hf_tiny
import torch
from transformers import Trainer


def run(out: str, resume: str | None = None) -> Trainer:
    args = hf_tiny.training_args(out, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                 max_steps=4, save_strategy="steps", save_steps=2)
    trainer = Trainer(model=hf_tiny.gpt2(), args=args, train_dataset=hf_tiny.TokenDataset(32))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def main() -> None:
    out = sys.argv[1]
    full = run(out)
    resumed = run(out, resume=os.path.join(out, "checkpoint-2"))
    accelerator = resumed.accelerator
    flat = torch.cat([p.detach().flatten() for p in resumed.model.parameters()])
    everyone = accelerator.gather(flat.unsqueeze(0))
    uninterrupted = torch.cat([p.detach().flatten() for p in full.model.parameters()])
    batches_per_rank = len(full.get_train_dataloader())  # a collective: on every rank
    if accelerator.is_main_process:
        print("HF2 " + json.dumps({
            "accelerator": type(accelerator).__module__,
            "num_processes": accelerator.num_processes,
            "distributed_type": str(accelerator.distributed_type),
            "accumulation": accelerator.gradient_accumulation_steps,
            "batches_per_rank": batches_per_rank,
            "full_losses": hf_tiny.losses(full),
            "resumed_losses": hf_tiny.losses(resumed),
            "resumed_equals_full": bool(torch.equal(flat, uninterrupted)),
            "ranks_agree": bool(torch.equal(everyone[0], everyone[1])),
        }), flush=True)


if __name__ == "__main__":
    main()

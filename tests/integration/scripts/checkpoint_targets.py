"""save_state targets in one launch of 2 processes (CPU, gloo): every rank refuses a target
holding someone else's files, and an unwritable one, naming it (not the staging folder),
without a hang; the files are kept, and a save and load afterwards work as usual.

Prints ``REFUSED rank=<r> kind=<error type> kept=<bool>``, ``UNWRITABLE rank=<r>
named=<bool>`` and ``AFTER rank=<r> loaded=<bool>``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accel_checkpoint.errors import CheckpointError
from torch import nn

from accel import Accelerator


def main() -> None:
    root = Path(sys.argv[1])
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = accelerator.unwrap_model(accelerator.prepare(nn.Linear(3, 2)))
    if accelerator.is_main_process:
        (root / "run").mkdir(parents=True)
        (root / "run" / "notes.txt").write_text("mine")
        (root / "blocker").write_text("a file where a folder should be")
    accelerator.wait_for_everyone()

    try:
        accelerator.save_state(root / "run")
        kind = "none"
    except CheckpointError as exc:
        kind = type(exc).__name__
    kept = sorted(p.name for p in (root / "run").iterdir()) == ["notes.txt"]
    print(f"REFUSED rank={rank} kind={kind} kept={kept}", flush=True)

    target = root / "blocker" / "ckpt"
    try:
        accelerator.save_state(target)
        named = False
    except CheckpointError as exc:
        named = str(target) in str(exc) and ".tmp-" not in str(exc)
        if not named:
            print(f"UNWRITABLE-MESSAGE rank={rank} {type(exc).__name__}: {exc}", flush=True)
    print(f"UNWRITABLE rank={rank} named={named}", flush=True)

    path = accelerator.save_state(root / "good")
    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(path)
    print(f"AFTER rank={rank} loaded={torch.equal(model.weight, expected)}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()

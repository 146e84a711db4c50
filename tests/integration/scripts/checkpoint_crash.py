"""One training step and a save_state of a ~50 MB model + Adam state (crash tests kill it).

Resumes from the newest complete checkpoint under argv[1] when there is one, so each run
saves the next numbered checkpoint. Prints SAVING before the save and SAVED after it.
``--gate FILE``: wait for FILE to exist before saving, so a test can start several runs at
once (their imports overlap) and let each save in turn.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from accel import Accelerator
from accel.checkpointing import ProjectConfiguration
from torch import nn


def main() -> None:
    work = Path(sys.argv[1])
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        str(work), automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    if (work / "checkpoints").is_dir():
        accelerator.load_state()
        print(f"LOADED step={accelerator.step}", flush=True)
    accelerator.backward(model(torch.randn(8, 1024)).pow(2).mean())
    optimizer.step()
    accelerator.step += 1
    if "--gate" in sys.argv:
        gate = Path(sys.argv[sys.argv.index("--gate") + 1])
        deadline = time.monotonic() + 600
        while not gate.exists():
            assert time.monotonic() < deadline, f"{gate} never appeared"
            time.sleep(0.01)
    print("SAVING", flush=True)
    path = accelerator.save_state()
    print(f"SAVED {path}", flush=True)


if __name__ == "__main__":
    main()

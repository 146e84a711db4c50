"""Rank 1 stops stepping (sleeps forever) while rank 0 enters the gradient all-reduce of
the next step: the launcher's watchdog (--stall_timeout) must name rank 1 and show this
file's sleeping line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from accel import Accelerator

accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(3):
    if step == 2 and accelerator.process_index == 1:
        Path(sys.argv[1]).write_text(str(time.time()))  # when the hang began
        time.sleep(10**6)  # the hang the watchdog must find
    loss = model(torch.randn(8, 4)).pow(2).mean()
    accelerator.backward(loss)  # DDP's all-reduce: rank 0 waits here for rank 1
    optimizer.step()
    optimizer.zero_grad()
print("finished", flush=True)

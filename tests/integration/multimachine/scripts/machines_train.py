"""The worker of the multi-machine tests: one script, two modes.

``train OUT``: 4 data-parallel steps of a tiny model on per-rank batches seeded by
(step, rank), so any layout of the same world size trains the same weights; rank 0 writes
them (float.hex) with the world size and each rank's machine to OUT/final.json.

``hold OUT`` and ``uneven OUT`` use torch.distributed alone (no Accelerator).
``hold OUT``: every rank writes OUT/rank-N.pid (its pid, its machine), then all-reduces
once a second until killed or for 120 s: a job that is running when the test interferes.

``once OUT``: one all-reduce, then exit.

``late OUT``: rank 1 writes OUT/rank-1.pid and sleeps 120 s before joining the process
group, so the others wait in ``init_process_group`` (a peer dying during start-up).

``uneven OUT``: after one barrier rank 0 returns at once and the others sleep 120 s, so
rank 0's launcher waits in torch's exit barrier.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def train(out: Path) -> None:
    from accel import Accelerator

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(4):
        gen = torch.Generator().manual_seed(100 * step + accelerator.process_index)
        x = torch.randn(8, 6, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    machines = [None] * accelerator.num_processes
    dist.all_gather_object(machines, os.environ.get("GROUP_RANK"))
    if accelerator.is_main_process:
        weights = accelerator.unwrap_model(model).state_dict()
        (out / "final.json").write_text(json.dumps({
            "world": accelerator.num_processes, "machines": machines,
            "weights": {k: [float(v).hex() for v in t.flatten().tolist()]
                        for k, t in weights.items()}}))


def hold(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (out / f"rank-{rank}.pid").write_text(f"{os.getpid()} {os.environ.get('GROUP_RANK')}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dist.all_reduce(torch.ones(1))
        time.sleep(1)


def once(out: Path) -> None:
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    (out / f"rank-{dist.get_rank()}.done").write_text(os.environ.get("GROUP_RANK", "?"))
    dist.barrier()
    dist.destroy_process_group()  # exiting with gloo's threads alive can abort the process


def late(out: Path) -> None:
    if os.environ["RANK"] == "1":
        (out / "rank-1.pid").write_text(str(os.getpid()))
        time.sleep(120)
    dist.init_process_group("gloo")


def uneven(out: Path) -> None:
    dist.init_process_group("gloo")
    dist.barrier()
    (out / f"rank-{dist.get_rank()}.pid").write_text(str(os.getpid()))
    if dist.get_rank() != 0:
        time.sleep(120)


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    {"train": train, "hold": hold, "once": once, "late": late,
     "uneven": uneven}[mode](folder)

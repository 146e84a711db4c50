"""The worker of the elastic-membership test: one epoch of a tiny model whose machines change.

``train OUT``: one epoch of 36 samples (batches of 2 per rank, the seedable sampler, exact
resume) with a verified checkpoint (automatic naming under OUT) after step 2, then every 2
steps after a restart; a restarted worker group resumes from the newest one with
``load_state()``, at whatever world size the rendezvous gave it. On the first attempt rank 0
writes OUT/ready after step 2's checkpoint and every rank then takes a second per step, so
the test's loss of a machine lands mid-epoch (and the test knows the step it resumes from).
Each rank appends every step (attempt, step, world, sample ids) to OUT/steps-A-R.jsonl as it
goes; rank 0 writes OUT/final.json (weights as float.hex, world, every rank's restart count
and machine, the step it resumed from).

``reference OUT CHECKPOINT``: the straight run the resumed one must equal: load CHECKPOINT
(saved by the first attempt) and train to the end of the epoch, saving nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from accel import Accelerator
from accel.checkpointing import ProjectConfiguration
from accel.utils import DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SIZE, BATCH, SAVE_EVERY, READY_AT = 36, 2, 2, 2


class Progress:
    """The step counter, checkpointed with the rest."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def run(out: Path, checkpoint: Path | None) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    reference = checkpoint is not None
    project = ProjectConfiguration(project_dir=str(out), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=project, dataloader_config=(
        DataLoaderConfiguration(use_seedable_sampler=True, data_seed=3, exact_resume=True)))
    rank = accelerator.process_index
    torch.manual_seed(0)
    features = torch.randn(SIZE, 4, generator=torch.Generator().manual_seed(1))
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(TensorDataset(torch.arange(SIZE), features),
                                     batch_size=BATCH, shuffle=True))
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    resumed_from = None
    if reference:
        accelerator.load_state(str(checkpoint))
        resumed_from = progress.step
    elif project.checkpoints_dir is not None and project.checkpoints_dir.is_dir() and any(
            project.checkpoints_dir.iterdir()):
        accelerator.load_state()  # the newest verified checkpoint
        resumed_from = progress.step
    log = None if reference else (out / f"steps-{attempt}-{rank}.jsonl").open("a")
    for ids, x in loader:
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        progress.step += 1
        if log is not None:
            log.write(json.dumps({"attempt": attempt, "step": progress.step, "ids": ids.tolist(),
                                  "world": accelerator.num_processes,
                                  "time": time.time()}) + "\n")
            log.flush()
        if not reference and progress.step % SAVE_EVERY == 0 and (
                attempt or progress.step == READY_AT):
            accelerator.save_state()
            if attempt == 0 and rank == 0 and progress.step == READY_AT:
                (out / "ready").write_text("1")
        if not reference and attempt == 0 and progress.step >= READY_AT:
            time.sleep(1.0)  # the test takes a machine away meanwhile
    who = [None] * accelerator.num_processes
    dist.all_gather_object(who, [os.environ.get("GROUP_RANK"), attempt])
    if rank == 0:
        weights = accelerator.unwrap_model(model).state_dict()
        (out / "final.json").write_text(json.dumps({
            "world": accelerator.num_processes, "resumed_from": resumed_from,
            "machines": [w[0] for w in who], "restart_counts": [w[1] for w in who],
            "steps": progress.step,
            "weights": {k: [float(v).hex() for v in t.flatten().tolist()]
                        for k, t in weights.items()}}))
    accelerator.end_training()


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    run(folder, Path(sys.argv[3]) if mode == "reference" else None)

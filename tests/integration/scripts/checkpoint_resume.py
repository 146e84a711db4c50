"""Exact resume through Accelerator.save_state/load_state, in one launch (1 or N processes).

Three phases in the same processes, each with fresh objects built the same way:
reference (N steps uninterrupted), interrupted (k steps, save_state, stop), resumed
(load_state into fresh objects, finish). Dropout, a shuffled dataloader and an LR
scheduler make any missed state show up. The resumed run must equal the reference bit
for bit (parameters and optimizer state) on every rank. With several processes it also
checks that save_state called on the main process only does not hang. ``--each-node``
(a job over two "machines" on this host) saves with ``save_on_each_node=True`` into a
directory per machine, standing for each machine's own disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
from accel_state import env
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.checkpointing import ProjectConfiguration
from accel.utils import DataLoaderConfiguration

STEPS, SAVE_AT = 9, 6  # 4 batches per epoch per process: the save lands mid-epoch 2
# Default data options on purpose but exact_resume (accel's switch: load_state restores the
# loader's mid-epoch position; Accelerate's default starts the epoch again): a shuffled
# loader resumes exactly without use_seedable_sampler or a generator of the user's (the prepared loader's permutation is a
# function of (seed, epoch) that its state_dict records, and iterating never draws from
# the global RNG, so dropout after the resume matches).
DATA = {"cpu": True}


def _data_config():
    return DataLoaderConfiguration(exact_resume=True)


def build(accelerator: Accelerator):
    """Model, optimizer, scheduler and an endless batch stream over the prepared loader."""
    torch.manual_seed(0)
    random.seed(0)
    x = torch.randn(16 * accelerator.num_processes, 6)
    y = x.sum(dim=1, keepdim=True)
    model = nn.Sequential(nn.Linear(6, 32), nn.Dropout(0.25), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    return model, optimizer, scheduler, batches(loader)


def batches(loader):
    """Epoch after epoch; started lazily, so a load_state before the first batch applies."""
    while True:
        yield from loader


def train(accelerator, model, optimizer, scheduler, stream, until: int) -> None:
    while accelerator.step < until:
        xb, yb = next(stream)
        loss = (model(xb) - yb).pow(2).mean() + 0 * random.random()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        accelerator.step += 1


def snapshot(model, optimizer) -> dict[str, torch.Tensor]:
    out = {f"param/{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for index, values in optimizer.state_dict()["state"].items():
        out.update({f"opt/{index}/{k}": v.clone() for k, v in values.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir")
    parser.add_argument("--async-save", action="store_true")
    parser.add_argument("--each-node", action="store_true")
    args = parser.parse_args()
    work = Path(args.workdir)
    if args.each_node:  # this machine's own disk
        work = work / f"node{os.environ['GROUP_RANK']}"
    DATA["dataloader_config"] = _data_config()
    each = {"save_on_each_node": args.each_node}

    reference = Accelerator(**DATA)
    objs = build(reference)
    train(reference, *objs, until=STEPS)
    expected = snapshot(objs[0].module if hasattr(objs[0], "module") else objs[0], objs[1])

    config = ProjectConfiguration(str(work), automatic_checkpoint_naming=True, total_limit=2,
                                  **each)
    first = Accelerator(**DATA, project_config=config)
    objs = build(first)
    train(first, *objs, until=SAVE_AT - 2)
    first.save_state()  # checkpoint_0, will be rotated away later
    train(first, *objs, until=SAVE_AT)
    saved = first.save_state(async_save=args.async_save)  # checkpoint_1
    train(first, *objs, until=SAVE_AT + 2)  # keeps training while (maybe) writing
    first.end_training()

    torch.manual_seed(1234)  # a restarted process: other RNG states
    random.seed(1234)
    again = Accelerator(**DATA, project_config=ProjectConfiguration(
        str(work), automatic_checkpoint_naming=True, total_limit=2, **each))
    objs = build(again)
    again.load_state()
    assert again.step == SAVE_AT, again.step
    assert again.save_iteration == 2, again.save_iteration
    train(again, *objs, until=STEPS)
    got = snapshot(objs[0].module if hasattr(objs[0], "module") else objs[0], objs[1])
    diffs = {k: (got[k] - v).abs().max().item() for k, v in expected.items()}
    exact = all(torch.equal(got[k], v) for k, v in expected.items())
    again.save_state()  # continues the numbering: checkpoint_2, rotation drops checkpoint_0
    rank = again.process_index
    print(f"RESUME rank={rank} exact={exact} saved={Path(saved).name} "
          f"max_diff={max(diffs.values())}", flush=True)

    if again.num_processes > 1 and not args.each_node:
        # a save on the main process only: the others say at once they are not saving (at
        # wait_for_everyone, or load_state) -- no peer timeout is waited out
        env.CHECKPOINT_PEER_TIMEOUT.set(20)
        start = time.perf_counter()
        if again.is_main_process:
            path = again.save_state()
            ranks = json.loads((Path(path) / "manifest.json").read_text())["ranks"]
            print(f"MAIN-ONLY ranks={ranks}", flush=True)
        again.wait_for_everyone()
        print(f"MAIN-ONLY-DONE rank={rank} seconds={time.perf_counter() - start:.3f}",
              flush=True)
        # the seed's advice: save on the main process, then load on every process; timed
        # against the same save made by every process (explicit paths: automatic naming
        # numbers each process's saves, and a main-only save advances the main's alone)
        again.project_configuration.automatic_checkpoint_naming = False
        timings = {}
        for mode in ("all", "main", "all", "main"):
            start = time.perf_counter()
            target = work / f"seed-{mode}"
            if mode == "all" or again.is_main_process:
                again.save_state(str(target))
            again.load_state(str(target))
            timings.setdefault(mode, []).append(time.perf_counter() - start)
        print(f"SEED rank={rank} all={min(timings['all']):.3f} "
              f"main={min(timings['main']):.3f}", flush=True)
    if again.is_local_main_process if args.each_node else again.is_main_process:
        names = sorted(p.name for p in (work / "checkpoints").iterdir())
        (work / "result.json").write_text(json.dumps({"checkpoints": names}))


if __name__ == "__main__":
    main()

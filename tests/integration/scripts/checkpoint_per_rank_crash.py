"""Per-rank checkpoints killed mid-save: the next load and save clean what the kill left, a
live job's folder is never touched, and the last good checkpoint loads (issue 39.1).

Run by tests/integration/test_checkpoint_per_rank_crash.py as one launch of 2 processes
with ``--max_restarts 2``, an FSDP2 model (``fully_shard``: DCP shards, layout
``sharded``) saved to WORK/checkpoints (automatic naming, ``total_limit=2``), one training
step before each save. By attempt (TORCHELASTIC_RESTART_COUNT):

0. saves checkpoint_0, 1 and 2; rank 0 is SIGKILLed halfway through deleting checkpoint_0
   (the rotation after checkpoint_2's commit);
1. load_state() (the latest), saves checkpoint_3: rank 1 is SIGKILLed once its files are
   in the staging folder, before rank 0 commits;
2. load_state() (the latest), saves checkpoint_3 (committed, then rotated).

A restarted attempt first makes the leftovers older than the cleaning's grace period, as a
restart minutes later would find them. Rank 0 prints ``START <n> <entries of
WORK/checkpoints>``, ``SAVING <n> checkpoint_<i> <digest of the full weights>`` before each
save and ``SAVED <n> <entries>`` after it, ``LOADED <n> checkpoint_<i> step=<s> <digest>``
and ``AFTER-LOAD <n> <entries>``; a rank prints ``KILLING <n> rank=<r>`` before it SIGKILLs
itself. :func:`kill_after_writing` is used by deepspeed_checks.py too.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
import types
from pathlib import Path

import torch
from accel import Accelerator
from accel.checkpointing import ProjectConfiguration
from accel_checkpoint import leftovers, per_rank
from accel_state import env
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset


def kill(rank: int, attempt: int = 0) -> None:
    print(f"KILLING {attempt} rank={rank}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_mid_rotation(rank: int, attempt: int) -> None:
    """This rank dies halfway through deleting a rotated-out checkpoint (one file gone)."""
    real = leftovers.shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if ".deleting-" in Path(path).name:
            next(p for p in sorted(Path(path).rglob("*")) if p.is_file()).unlink()
            kill(rank, attempt)
        real(path, *args, **kwargs)

    leftovers.shutil = types.SimpleNamespace(rmtree=rmtree)


def kill_after_writing(rank: int, attempt: int = 0) -> None:
    """This rank dies once its files of the next per-rank save are in the staging folder,
    before rank 0 commits."""
    real = per_rank._write_and_hash

    def write_and_hash(*args, **kwargs):
        files = real(*args, **kwargs)
        kill(rank, attempt)
        return files

    per_rank._write_and_hash = write_and_hash


def build(work: Path):
    config = ProjectConfiguration(str(work), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    fully_shard(model[0])
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = TensorDataset(torch.randn(8, 8, generator=torch.Generator().manual_seed(1)),
                         torch.randn(8, 1, generator=torch.Generator().manual_seed(2)))
    loader = DataLoader(data, batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader


def digest(accelerator: Accelerator, model: nn.Module) -> str:
    state = accelerator.get_state_dict(model)  # a collective; the full weights on rank 0
    sha = hashlib.sha256()
    for key in sorted(state):
        sha.update(key.encode() + state[key].float().contiguous().numpy().tobytes())
    return sha.hexdigest()[:16]


def entries(work: Path) -> str:
    return ",".join(sorted(p.name for p in (work / "checkpoints").iterdir()))


def age_leftovers(work: Path) -> None:
    """What an earlier attempt left, older than the cleaning's grace period."""
    past = time.time() - leftovers.GRACE_S - 60
    for folder in (work / "checkpoints").iterdir():
        if any(infix in folder.name for infix in (".tmp-", ".deleting-")):
            os.utime(folder, (past, past))


def step_and_save(accelerator: Accelerator, model, optimizer, loader, work: Path,
                  attempt: int) -> None:
    x, y = next(iter(loader))
    accelerator.backward((model(x) - y).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    accelerator.step += 1
    name = f"checkpoint_{accelerator.project_configuration.iteration}"
    weights = digest(accelerator, model)
    if accelerator.is_main_process:
        print(f"SAVING {attempt} {name} {weights}", flush=True)
    accelerator.save_state()
    if accelerator.is_main_process:
        print(f"SAVED {attempt} {entries(work)}", flush=True)


def main(work: Path) -> None:
    attempt = env.TORCHELASTIC_RESTART_COUNT.get_int(0)
    accelerator, model, optimizer, loader = build(work)
    rank = accelerator.process_index
    if rank == 0:
        print(f"START {attempt} {entries(work)}", flush=True)
    if attempt > 0:
        if rank == 0:
            age_leftovers(work)
        accelerator.load_state()
        loaded = f"checkpoint_{accelerator.project_configuration.iteration - 1}"
        weights = digest(accelerator, model)
        if rank == 0:
            print(f"LOADED {attempt} {loaded} step={accelerator.step} {weights}", flush=True)
            print(f"AFTER-LOAD {attempt} {entries(work)}", flush=True)
    for save in range(3 if attempt == 0 else 1):
        if attempt == 0 and save == 2 and rank == 0:
            kill_mid_rotation(rank, attempt)
        if attempt == 1 and rank == 1:
            kill_after_writing(rank, attempt)
        step_and_save(accelerator, model, optimizer, loader, work, attempt)
    accelerator.wait_for_everyone()
    print(f"DONE {attempt} rank={rank}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

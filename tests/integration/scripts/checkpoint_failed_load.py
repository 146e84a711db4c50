"""A load that fails on one rank changes nothing on any rank (2 processes, CPU, gloo).

DDP (the replicated layout, through the Accelerator): a model, AdamW, a scheduler, a
prepared loader and a registered object are saved, trained on, then loaded while rank 1's
registered object refuses its state (after writing it). Both ranks raise — rank 1 its own
error, rank 0 a CheckpointError naming rank 1 — and both hold exactly what they held before
(model, optimizer, scheduler, loader position, registered object, RNG, step). The same load
without the failure then loads on both.

FSDP2 (the sharded layout, ``load_rank_state`` with DCP): rank 1's DCP load writes into the
sharded parameters and optimizer state, then fails; both ranks put back their shards,
optimizer state and scheduler.
Prints ``DDP-FAILED``, ``DDP-GOOD``, ``FSDP2-FAILED`` lines for the test to check.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accel import Accelerator
from accel_checkpoint.dcp_writer import DCPWriter
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.per_rank import load_rank_state, save_rank_state
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Counter:
    def __init__(self) -> None:
        self.n, self.fail = 0, False

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]
        if self.fail:
            self.fail = False
            raise KeyError("counter refuses on this rank")


def plain(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def ddp(out: Path) -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4,
                        shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)

    def train(batches: int) -> None:
        for i, (x, y) in enumerate(loader):
            if i == batches:
                break
            accelerator.backward((model(x) - y).square().mean())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

    train(2)
    counter.n, accelerator.step = 2, 2
    saved = accelerator.save_state(str(out / "ddp"))
    saved_model = plain(model.state_dict())
    train(3)
    counter.n, accelerator.step = 5, 5
    torch.manual_seed(100 + rank)
    random.seed(200 + rank)

    def everything() -> dict:
        return {"model": plain(model.state_dict()), "optimizer": plain(optimizer.state_dict()),
                "scheduler": plain(scheduler.state_dict()), "loader": plain(loader.state_dict()),
                "counter": counter.n, "step": accelerator.step,
                "rng": (torch.get_rng_state(), random.getstate())}

    before = everything()
    counter.fail = rank == 1
    try:
        accelerator.load_state(saved)
        error = "none"
    except KeyError:
        error = "own"
    except CheckpointError as exc:
        error = "peer" if "Rank 1 could not load" in str(exc) else f"other: {exc}"
    after = everything()
    unchanged = all(same(plain(list(before[k])) if k == "rng" else before[k],
                         plain(list(after[k])) if k == "rng" else after[k]) for k in before)
    print(f"DDP-FAILED rank={rank} error={error} unchanged={unchanged}", flush=True)
    accelerator.load_state(saved)
    print(f"DDP-GOOD rank={rank} loaded={same(plain(model.state_dict()), saved_model)} "
          f"counter={counter.n} step={accelerator.step}", flush=True)


def fsdp2(out: Path) -> None:
    from torch.distributed.fsdp import fully_shard

    rank = dist.get_rank()

    def build(seed: int):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        for step in range(seed + 1):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step + 10 * rank))
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
        return model, optimizer, scheduler

    model, optimizer, scheduler = build(2)
    path = save_rank_state(out / "fsdp2", DCPWriter(), {"model": model, "optimizer": optimizer},
                           replicated={"scheduler": scheduler}, rng=True)
    model, optimizer, scheduler = build(0)
    local = {"model": {k: v.to_local().clone() for k, v in model.state_dict().items()},
             "optimizer": plain({k: {n: (t.to_local() if hasattr(t, "to_local") else t)
                                     for n, t in s.items()}
                                 for k, s in enumerate(optimizer.state.values())}),
             "scheduler": plain(scheduler.state_dict()), "rng": torch.get_rng_state()}
    real = DCPWriter.load

    def load_then_fail(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if rank == 1:
            raise OSError("rank 1 lost its disk")
    DCPWriter.load = load_then_fail
    try:
        load_rank_state(path, DCPWriter(), {"model": model, "optimizer": optimizer},
                        replicated={"scheduler": scheduler}, rng=True)
        error = "none"
    except OSError:
        error = "own"
    except CheckpointError as exc:
        error = "peer" if "Rank 1 could not load" in str(exc) else f"other: {exc}"
    finally:
        DCPWriter.load = real
    now = {"model": {k: v.to_local().clone() for k, v in model.state_dict().items()},
           "optimizer": plain({k: {n: (t.to_local() if hasattr(t, "to_local") else t)
                                   for n, t in s.items()}
                               for k, s in enumerate(optimizer.state.values())}),
           "scheduler": plain(scheduler.state_dict()), "rng": torch.get_rng_state()}
    print(f"FSDP2-FAILED rank={rank} error={error} unchanged={same(local, now)}", flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    ddp(out)
    fsdp2(out)


if __name__ == "__main__":
    main()

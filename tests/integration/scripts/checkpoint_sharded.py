"""Sharded (DCP) checkpoints of an FSDP2 model, in one launch of 2 processes (CPU, gloo).

A model sharded with ``fully_shard`` trains 2 steps, is saved with
``save_sharded_state``, trains 2 more (the reference). Fresh objects built from another
seed, sharded the same way, load the checkpoint and repeat the 2 steps: parameters,
optimizer state and scheduler must equal the reference bit for bit. A copy with one
flipped byte is refused on every rank, naming the file (no hang). Rank 0 writes the full
state dict gathered at save time so the test can compare ``accel merge-weights`` with it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accel_checkpoint.errors import CorruptCheckpointError
from accel_checkpoint.sharded import load_sharded_state, save_sharded_state
from accel_state import PartialState
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def build(seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps: range, rank: int) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(4, 8, generator=gen)
        loss = (model(x) - x[:, :4]).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()


def full(model, optimizer) -> tuple[dict, dict]:
    """Full (gathered) model and optimizer state; empty off rank 0 (cpu_offload)."""
    return (get_model_state_dict(model, options=FULL),
            get_optimizer_state_dict(model, optimizer, options=FULL))


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def late_corruption(saved: Path, work: Path, model, optimizer, rank: int) -> None:
    """Rank 1's shard damaged AFTER every rank's verification pass passed (another process
    rewriting it): DCP reads only hash-checked bytes, so rank 1 finds it, and the ranks
    agree before any fills a tensor: refused on every rank, no rank's model changed."""
    from accel_checkpoint import per_rank

    late = work / "late"
    if rank == 0:
        shutil.copytree(saved, late)
    dist.barrier()
    checked = per_rank._raise_first

    def then_damage(problems):
        checked(problems)  # every rank's share passed
        if rank == 0:
            victim = late / "__1_0.distcp"
            raw = bytearray(victim.read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            victim.write_bytes(bytes(raw))
        dist.barrier()

    def local():  # this rank's own shards of the weights and of Adam's state
        own = [getattr(t, "to_local", lambda t=t: t)().clone() for t in model.parameters()]
        return own + [getattr(t, "to_local", lambda t=t: t)().clone()
                      for st in optimizer.state.values() for t in st.values()
                      if isinstance(t, torch.Tensor)]

    before = local()
    per_rank._raise_first = then_damage
    try:
        load_sharded_state(late, {"model": model, "optimizer": optimizer})
        print(f"LATE-CORRUPT-ACCEPTED rank={rank}", flush=True)
    except CorruptCheckpointError as exc:
        print(f"LATE-CORRUPT-REFUSED rank={rank} file={Path(exc.path).name} "
              f"unchanged={all(map(torch.equal, before, local()))}", flush=True)
    finally:
        per_rank._raise_first = checked


def main(work: Path) -> None:
    state = PartialState(cpu=True)
    rank = state.process_index
    model, optimizer, scheduler = build(seed=0)
    train(model, optimizer, scheduler, range(0, 2), rank)
    saved = save_sharded_state(work / "sharded", {"model": model, "optimizer": optimizer,
                                                  "scheduler": scheduler},
                               data={"epoch": 1}, step=2)
    at_save, _ = full(model, optimizer)
    train(model, optimizer, scheduler, range(2, 4), rank)
    reference = full(model, optimizer)

    model2, optimizer2, scheduler2 = build(seed=1)  # different weights: the load must matter
    loaded = load_sharded_state(saved, {"model": model2, "optimizer": optimizer2,
                                        "scheduler": scheduler2})
    assert loaded.step == 2 and loaded.data == {"epoch": 1}, loaded
    assert scheduler2.last_epoch == 2, scheduler2.state_dict()
    train(model2, optimizer2, scheduler2, range(2, 4), rank)
    resumed = full(model2, optimizer2)
    print(f"SHARDED-RESUME rank={rank} exact={same(reference, resumed)} "
          f"lr={scheduler2.get_last_lr() == scheduler.get_last_lr()}", flush=True)

    # A flipped byte in rank 1's shard file: refused on every rank, naming that file.
    broken = work / "broken"
    if rank == 0:
        shutil.copytree(saved, broken)
        victim = broken / "__1_0.distcp"
        raw = bytearray(victim.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        victim.write_bytes(bytes(raw))
    dist.barrier()
    try:
        load_sharded_state(broken, {"model": model2, "optimizer": optimizer2})
        print(f"CORRUPT-ACCEPTED rank={rank}", flush=True)
    except CorruptCheckpointError as exc:
        print(f"CORRUPT-REFUSED rank={rank} file={Path(exc.path).name}", flush=True)

    late_corruption(saved, work, model2, optimizer2, rank)

    if rank == 0:
        save_file({k: v.contiguous() for k, v in at_save.items()}, work / "full_at_save.safetensors")
        (work / "result.json").write_text(json.dumps({"keys": sorted(at_save)}))
    dist.barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Accelerator.save_state/load_state of an FSDP2 model, in one launch of 2 processes (CPU, gloo).

The user applies ``fully_shard`` before ``prepare`` (no FSDP strategy yet). A model with
dropout, Adam, an LR scheduler, a shuffled prepared dataloader and a registered counter
train with per-rank RNG seeds; ``save_state`` runs twice under automatic naming with
``total_limit=1`` (the first with ``async_save=True``, which must warn and save
synchronously; the second commit rotates the first away), and a save pre-hook writes a
file per rank into its ``output_dir``. Training goes on to the end: the reference. Fresh
objects built from other seeds, in the same processes, ``load_state()`` the latest
checkpoint and train to the end: parameters and optimizer state (gathered with
``full_tensor``) must equal the reference bit for bit on every rank. Last, an unsharded
model loads the sharded checkpoint (across layouts, through full state dicts) with the
weights the sharded model had loaded.
"""

from __future__ import annotations

import os
import random
import sys
import warnings
from pathlib import Path

import torch
from accel_checkpoint.errors import CheckpointError
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration
from checkpoint_resume import batches, train  # the same loop as the replicated resume test
from accel.checkpointing import ProjectConfiguration

STEPS, FIRST_SAVE, SAVE_AT = 9, 3, 6  # 4 batches per epoch per process: saves mid-epoch


class Counter:
    """A register_for_checkpointing object (plain state, saved whole by rank 0)."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 32), nn.Dropout(0.25), nn.ReLU(), nn.Linear(32, 1))


def build(accelerator: Accelerator, seed: int):
    """FSDP2 model, Adam, StepLR and an endless stream over a shuffled prepared loader."""
    gen = torch.Generator().manual_seed(0)  # the same data whatever the seed
    x = torch.randn(16 * accelerator.num_processes, 6, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    torch.manual_seed(seed)
    model = net()
    fully_shard(model[0])
    fully_shard(model[3])
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    # the DDP strategy passes an already sharded (DTensor) model through unwrapped
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    assert not isinstance(model, torch.nn.parallel.DistributedDataParallel)
    return model, optimizer, scheduler, batches(loader)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective for DTensors: every rank calls it in the same order)."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach().clone()


def snapshot(model, optimizer, scheduler) -> dict[str, object]:
    out: dict[str, object] = {f"param/{k}": full(v) for k, v in model.state_dict().items()}
    for index, values in optimizer.state_dict()["state"].items():
        out.update({f"opt/{index}/{k}": full(v) for k, v in values.items()})
    out["lr"] = scheduler.get_last_lr()
    return out


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k] for k, v in a.items())


def main(work: Path) -> None:
    config = ProjectConfiguration(str(work), automatic_checkpoint_naming=True, total_limit=1)
    exact = DataLoaderConfiguration(exact_resume=True)  # load_state restores the position
    first = Accelerator(cpu=True, project_config=config, dataloader_config=exact)
    rank = first.process_index
    objs = build(first, seed=0)
    counter = Counter()
    first.register_for_checkpointing(counter)
    hooked: list[tuple[int, int, str]] = []

    def save_hook(models, weights, output_dir) -> None:
        hooked.append((len(models), len(weights), output_dir))
        (Path(output_dir) / "hook").mkdir(exist_ok=True)
        (Path(output_dir) / "hook" / f"extra_{rank}.txt").write_text(f"rank {rank}")

    first.register_save_state_pre_hook(save_hook)
    torch.manual_seed(100 + rank)  # dropout differs per rank: each rank's RNG must come back
    random.seed(100 + rank)
    train(first, *objs, until=FIRST_SAVE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first.save_state(async_save=True)  # checkpoint_0, rotated away by the next save
    async_warned = any(issubclass(w.category, UserWarning)
                       and "saved synchronously" in str(w.message) for w in caught)
    train(first, *objs, until=SAVE_AT)
    counter.value = SAVE_AT
    saved = first.save_state()  # checkpoint_1
    hook_ok = (len(hooked) == 2 and all(n == 1 and w == 0 and ".tmp-" in d for n, w, d in hooked)
               and Path(saved, "hook", f"extra_{rank}.txt").read_text() == f"rank {rank}")
    train(first, *objs, until=STEPS)
    expected = snapshot(objs[0], objs[1], objs[2])

    torch.manual_seed(1234 + rank)  # a restarted process: other weights, other RNG states
    random.seed(1234 + rank)
    again = Accelerator(cpu=True, dataloader_config=exact, project_config=ProjectConfiguration(
        str(work), automatic_checkpoint_naming=True, total_limit=1))
    objs = build(again, seed=1)
    counter = Counter()
    again.register_for_checkpointing(counter)
    loaded_from: list[str] = []
    again.register_load_state_pre_hook(lambda models, input_dir: loaded_from.append(input_dir))
    torch.manual_seed(4321 + rank)
    again.load_state()
    at_load = {k: full(v) for k, v in objs[0].state_dict().items()}
    state_ok = (again.step == SAVE_AT and again.save_iteration == 2 and counter.value == SAVE_AT
                and loaded_from == [saved])
    train(again, *objs, until=STEPS)
    exact = same(expected, snapshot(objs[0], objs[1], objs[2]))
    print(f"FACADE-RESUME rank={rank} exact={exact} state={state_ok} hook={hook_ok} "
          f"async_warned={async_warned} saved={Path(saved).name}", flush=True)

    plain = Accelerator(cpu=True)
    unsharded = plain.prepare(net())
    plain.load_state(saved)  # sharded into unsharded: the full weights on every rank
    weights = plain.unwrap_model(unsharded).state_dict()
    print(f"UNSHARDED-LOADED rank={rank} equal={same(dict(weights), at_load)}", flush=True)
    plain.wait_for_everyone()

    # save_model of the sharded model: full weights gathered to the main process
    model = objs[0]
    full_weights = {k: full(v) for k, v in model.state_dict().items()}
    again.save_model(model, work / "weights")
    if again.is_main_process:
        from safetensors.torch import load_file

        written = load_file(work / "weights" / "model.safetensors")
        print(f"SAVE-MODEL equal={same(written, full_weights)} keys={len(written)}", flush=True)
    again.wait_for_everyone()

    # save_state on the main process only: a sharded save needs every rank, so rank 0
    # raises after ACCEL_CHECKPOINT_PEER_TIMEOUT instead of hanging the job
    os.environ["ACCEL_CHECKPOINT_PEER_TIMEOUT"] = "2"
    if again.is_main_process:
        try:
            again.save_state(work / "main_only")
            print("MAIN-ONLY saved", flush=True)
        except CheckpointError as exc:
            print(f"MAIN-ONLY refused every_process={'every process' in str(exc)} "
                  f"left={sorted(p.name for p in work.iterdir() if 'main_only' in p.name)}",
                  flush=True)
    again.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

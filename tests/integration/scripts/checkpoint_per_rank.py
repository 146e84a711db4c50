"""A RankCheckpointWriter of the test's own in one launch of 2 processes (CPU, gloo).

1. accel-checkpoint's per-rank protocol: each rank saves a model with its own weights
   (``rank{r}.safetensors``); fresh models load them back, each rank its own.
2. A copy with one flipped byte in rank 1's file is refused on every rank, naming it.
3. A writer that fails on rank 1 only: every rank raises naming rank 1, nothing is
   committed and the previous checkpoint at that path is untouched.
4. Through the Accelerator: the strategy hands the writer over from
   ``checkpoint_format``; save_state / load_state restore model, optimizer, scheduler.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# the test writers live with accel-checkpoint's tests
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "packages" / "accel-checkpoint"
                       / "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError  # noqa: E402
from accel_checkpoint.manifest import verify_checkpoint  # noqa: E402
from accel_checkpoint.per_rank import load_rank_state, save_rank_state  # noqa: E402
from checkpoint_writers import SafetensorsWriter  # noqa: E402
from torch import nn  # noqa: E402

from accel import Accelerator  # noqa: E402


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values(), strict=True))


def protocol(work: Path, rank: int) -> None:
    model = net(seed=10 + rank)  # each rank its own weights, as shards are
    path = save_rank_state(work / "ckpt", SafetensorsWriter(), {"model": model},
                           data={"epoch": 1}, step=3, rng=True)
    manifest = verify_checkpoint(path, deep=True)
    listed = {"rank0.safetensors", "rank1.safetensors", "rank0.json", "rank1.json",
              "random_states_0.safetensors", "random_states_1.safetensors"} <= set(manifest.files)
    fresh = net(seed=99)
    loaded = load_rank_state(path, SafetensorsWriter(), {"model": fresh}, rng=True)
    print(f"PER-RANK rank={rank} own={same(model, fresh)} listed={listed} "
          f"world={manifest.world_size} layout={manifest.layout} step={loaded.step}", flush=True)

    broken = work / "broken"
    if rank == 0:
        shutil.copytree(path, broken)
        victim = broken / "rank1.safetensors"
        raw = bytearray(victim.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        victim.write_bytes(bytes(raw))
    dist.barrier()
    writer = SafetensorsWriter()
    try:
        load_rank_state(broken, writer, {"model": net(seed=5)})
        print(f"CORRUPT-ACCEPTED rank={rank}", flush=True)
    except CorruptCheckpointError as exc:
        print(f"CORRUPT-REFUSED rank={rank} file={Path(exc.path).name} loads={writer.loads}",
              flush=True)

    try:
        save_rank_state(path, SafetensorsWriter(fail_on_rank=1), {"model": model}, step=4)
        print(f"FAILURE-COMMITTED rank={rank}", flush=True)
    except CheckpointError as exc:
        dist.barrier()
        left = sorted(p.name for p in work.iterdir())
        kept = verify_checkpoint(path, deep=True).step == 3
        print(f"RANK-FAILURE rank={rank} named={'rank 1: OSError: disk full on rank 1' in str(exc)}"
              f" kept={kept} left={left}", flush=True)


def build(seed: int):
    """An Accelerator whose strategy saves through the writer, and prepared objects."""
    accelerator = Accelerator(cpu=True)
    accelerator.strategy.checkpoint_format = lambda models: SafetensorsWriter()
    model = net(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler)


def facade(work: Path) -> None:
    accelerator, model, optimizer, scheduler = build(0)
    rank = accelerator.process_index
    for _ in range(2):
        accelerator.backward(model(torch.ones(3, 4)).pow(2).mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    saved = accelerator.save_state(work / "facade")
    expected = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    again, model2, optimizer2, scheduler2 = build(7)  # a restarted run: other weights
    again.load_state(saved)
    got = again.unwrap_model(model2).state_dict()
    exact = all(torch.equal(got[k], v) for k, v in expected.items())
    state = (scheduler2.get_last_lr() == scheduler.get_last_lr()
             and optimizer2.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys())
    layout = verify_checkpoint(saved).layout
    print(f"FACADE rank={rank} exact={exact} state={state} layout={layout}", flush=True)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    work = Path(sys.argv[1])
    facade(work)  # starts the process group
    protocol(work, dist.get_rank())
    dist.barrier()

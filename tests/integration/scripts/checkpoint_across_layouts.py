"""Checkpoints loaded across layouts: DDP (replicated) <-> FSDP2 (sharded), any world size.

``save ROOT`` (2 processes): a DDP run trains 3 steps with Adam and an LR scheduler, saves
(``ddp``: replicated), records its state and takes one more step. An FSDP2 run (other
weights, fully_shard before prepare) loads ``ddp``: weights, Adam's exp_avg/exp_avg_sq/step
(gathered whole) and the scheduler equal the saved ones; one more step equals the
unbroken DDP run's. It then saves (``fsdp``: sharded), records, and a fresh DDP run loads
``fsdp`` the same way, and steps like the FSDP2 run. Refusals change nothing: a sharded
checkpoint with a flipped byte in a shard, and one into a model of another shape.

``load ROOT`` (1 process): the 2-process sharded checkpoint into one unsharded model and
into one FSDP2 model (the FSDP strategy, a world of one), then the replicated one into
that FSDP2 model: states equal the recorded ones.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import torch
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.manifest import read_manifest
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from accel import Accelerator, FullyShardedDataParallelPlugin


def net(width: int = 16) -> nn.Module:
    return nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 3))


def build(accelerator: Accelerator, seed: int, shard: bool, width: int = 16):
    torch.manual_seed(seed)
    model = net(width)
    if shard:  # the user shards; the prepared model is then saved in the sharded layout
        fully_shard(model[0])
        fully_shard(model[2])
        fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return accelerator.prepare(model, optimizer, scheduler)


def step(accelerator, model, optimizer, scheduler, index: int) -> None:
    """One training step on data that depends on the step and the rank only."""
    gen = torch.Generator().manual_seed(100 * index + accelerator.process_index)
    x = torch.randn(4, 6, generator=gen)
    accelerator.backward(model(x).pow(2).mean())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective for a DTensor: every rank calls it in the same order)."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach().clone()


def snapshot(accelerator, model, optimizer, scheduler) -> dict[str, torch.Tensor]:
    """Weights and optimizer state by parameter name, whole; the scheduler's last LR."""
    module = accelerator.unwrap_model(model)
    names = {id(p): n for n, p in module.named_parameters()}
    out = {f"param/{n}": full(p) for n, p in module.named_parameters()}
    for param, values in optimizer.state.items():
        out.update({f"opt/{names[id(param)]}/{k}": full(v) for k, v in values.items()})
    out["lr"] = torch.tensor(scheduler.get_last_lr())
    return out


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


def close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """One step by DDP and by FSDP2 (all-reduce vs reduce-scatter) agree to rounding."""
    return a.keys() == b.keys() and all(torch.allclose(v, b[k], rtol=1e-5, atol=1e-6)
                                        for k, v in a.items())


def save_phase(root: Path) -> None:
    ddp = Accelerator(cpu=True)
    rank = ddp.process_index
    objs = build(ddp, seed=0, shard=False)
    for index in range(3):
        step(ddp, *objs, index)
    ddp.step = 3
    ddp_path = ddp.save_state(root / "ddp")
    saved_ddp = snapshot(ddp, *objs)
    if rank == 0:
        save_file(saved_ddp, root / "ddp_expected.safetensors")
    step(ddp, *objs, 3)
    after_ddp = snapshot(ddp, *objs)

    fsdp = Accelerator(cpu=True)
    objs = build(fsdp, seed=1, shard=True)
    before = snapshot(fsdp, *objs)
    fsdp.load_state(ddp_path)
    loaded = snapshot(fsdp, *objs)
    step(fsdp, *objs, 3)
    print(f"DDP-INTO-FSDP rank={rank} layout={read_manifest(ddp_path).layout} "
          f"changed={not equal(before, loaded)} equal={equal(loaded, saved_ddp)} "
          f"step={fsdp.step} next={close(snapshot(fsdp, *objs), after_ddp)}", flush=True)

    fsdp_path = fsdp.save_state(root / "fsdp")
    saved_fsdp = snapshot(fsdp, *objs)
    if rank == 0:
        save_file(saved_fsdp, root / "fsdp_expected.safetensors")
    step(fsdp, *objs, 4)
    after_fsdp = snapshot(fsdp, *objs)

    again = Accelerator(cpu=True)
    objs = build(again, seed=2, shard=False)
    again.load_state(fsdp_path)
    loaded = snapshot(again, *objs)
    step(again, *objs, 4)
    print(f"FSDP-INTO-DDP rank={rank} layout={read_manifest(fsdp_path).layout} "
          f"equal={equal(loaded, saved_fsdp)} step={again.step} "
          f"next={close(snapshot(again, *objs), after_fsdp)}", flush=True)
    refusals(root, fsdp_path, rank)


def refusals(root: Path, fsdp_path: str, rank: int) -> None:
    """Refused loads across layouts change nothing, on every rank alike."""
    damaged = root / "damaged"
    if rank == 0:
        shutil.copytree(fsdp_path, damaged)
        shard = damaged / "__1_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    accelerator = Accelerator(cpu=True)
    accelerator.wait_for_everyone()
    objs = build(accelerator, seed=3, shard=False)
    before = snapshot(accelerator, *objs)
    try:
        accelerator.load_state(damaged)
        corrupt = "accepted"
    except CorruptCheckpointError as exc:
        corrupt = f"named={'__1_0.distcp' in str(exc)}"
    print(f"CORRUPT-REFUSED rank={rank} {corrupt} "
          f"unchanged={equal(before, snapshot(accelerator, *objs))}", flush=True)

    other = Accelerator(cpu=True)
    objs = build(other, seed=3, shard=False, width=8)
    before = snapshot(other, *objs)
    try:
        other.load_state(fsdp_path)
        misfit = "accepted"
    except CheckpointError as exc:
        misfit = f"shapes={'shape mismatch' in str(exc) and 'nothing was loaded' in str(exc)}"
    print(f"MISFIT-REFUSED rank={rank} {misfit} "
          f"unchanged={equal(before, snapshot(other, *objs))}", flush=True)


def load_phase(root: Path) -> None:
    """One process: the 2-process sharded checkpoint, unsharded and sharded over one."""
    expected = load_file(root / "fsdp_expected.safetensors")
    plain = Accelerator(cpu=True)
    objs = build(plain, seed=4, shard=False)
    with warnings.catch_warnings():  # rank 1's RNG state has no process here: warned
        warnings.simplefilter("ignore")
        plain.load_state(root / "fsdp")
    print(f"SHARDED-2-INTO-PLAIN-1 equal={equal(snapshot(plain, *objs), expected)}", flush=True)

    fsdp = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    objs = build(fsdp, seed=5, shard=False)
    sharded = isinstance(next(objs[0].parameters()), DTensor)
    fsdp.load_state(root / "fsdp")
    print(f"SHARDED-2-INTO-FSDP-1 sharded={sharded} "
          f"equal={equal(snapshot(fsdp, *objs), expected)}", flush=True)
    fsdp.load_state(root / "ddp")  # replicated, from 2 processes, into FSDP2 over one
    expected = load_file(root / "ddp_expected.safetensors")
    print(f"REPLICATED-2-INTO-FSDP-1 step={fsdp.step} "
          f"equal={equal(snapshot(fsdp, *objs), expected)}", flush=True)


if __name__ == "__main__":
    {"save": save_phase, "load": load_phase}[sys.argv[1]](Path(sys.argv[2]))

"""Checkpoint save/load of a model + Adam state against raw safetensors, same run.

Floor ("raw"): ``safetensors.torch.save_file`` of the model's tensors and of the
optimizer's tensors, each file fsynced; ``load_file`` of both. Candidate: accel's
``Accelerator.save_state`` / ``load_state`` of the same model and optimizer (which also
hash every byte for the manifest, write RNG states, fsync the directory and rename it into
place; loading verifies every digest, xxh3-128 by default, and loads into the model and
optimizer).

Load floors, all in the same run:
- ``raw``: lazy ``load_file`` of both files (maps them; reads no byte): the issue's floor.
- ``raw+load_state_dict``: ``load_file`` + ``model.load_state_dict`` + the optimizer's
  ``load_state_dict`` (state re-nested): the fair floor for a load that materialises the
  state (the model's bytes are copied; optimizer tensors stay mapped, as in accel).
- ``raw+load_state_dict+sha256``: the same plus one sha256 pass over both files on one
  thread, the least a load that verifies every byte can cost without parallelism.
Candidates: ``load_state()`` (``verify="full"``: every digest before anything is loaded)
and ``load_state(verify="background")`` (loads at once, hashes on background threads; the
first optimizer step waits for it), plus the time until that background check has passed.

Load + first step: the same load followed by one training step (forward, backward, Adam
step, which writes every page of the optimizer state). accel reads the optimizer's file into
memory (so nothing it keeps pins the file once rotation deletes it) where the floor's
tensors view a mapping whose pages the step then copies one by one (copy-on-write): this row
counts both. Target: <= 1.05.

Every page touched (the issue's row): the fair floor for a load followed by training is
``raw+load_state_dict+touch`` — the same load, then one element read per 4 KiB page of every
model and optimizer tensor (what the first step does anyway; a mapped load has read nothing
yet); the candidate ``accel+touch`` is ``load_state()`` (full verification) plus the same
touch. Target: <= 1.25.

Accelerate's ``save_state``/``load_state`` (no fsync, no hashing) get a column of their own
when accelerate is importable (``uv run --with accelerate ...``; it is no dependency).

Async save: what an ``async_save=True`` costs the training loop — the time of
``save_state(async_save=True)`` plus the next training step, minus a plain training step
(the step waits for the parameters/optimizer state to be copied) — versus a synchronous
save, measured on a loop of forward/backward/step on the same model.

Targets: save <= 1.1x, load <= 1.05x the floor; async save blocks <= 10% of a sync save.

    uv run python tools/bench/bench_checkpoint.py               # ~256 MB of state
    uv run python tools/bench/bench_checkpoint.py --size-mb 1024
    python3 bench_checkpoint.py --device cuda                   # model on the GPU
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import import_accelerate, interleaved, report
from safetensors.torch import load_file, save_file
from torch import nn

from accel import Accelerator
from accel_checkpoint import wait_for_staging


def build(size_mb: int, device: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    """fp32 model of size_mb / 3 plus Adam's two moments (total ~= size_mb)."""
    layer_mb = 16  # Linear(2048, 2048): 16 MiB of weights
    layers = max(1, round(size_mb / 3 / layer_mb))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(layers)]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    return model, optimizer


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    return {f"{i}/{k}": v for i, s in optimizer.state_dict()["state"].items()
            for k, v in s.items()}


def touch_every_page(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read one element per 4 KiB page of every model and optimizer tensor: what the first
    training step would do, and what a lazily mapped load has not done yet."""
    tensors = list(model.state_dict().values()) + list(optimizer_tensors(optimizer).values())
    for tensor in tensors:
        flat = tensor.reshape(-1)
        flat[:: max(1, 4096 // tensor.element_size())].sum()


def fsynced_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_file(tensors, str(path))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=256, help="model + Adam state, MB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--batch", type=int, default=64, help="batch of the training step")
    args = parser.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device

    root = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    model, optimizer = build(args.size_mb, device)
    accelerator = Accelerator(cpu=device == "cpu")
    model, optimizer = accelerator.prepare(model, optimizer)
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    total += sum(t.numel() * t.element_size() for t in optimizer_tensors(optimizer).values())
    counter = iter(range(10**9))
    accelerate = import_accelerate()
    if accelerate is not None:  # its own copy of the model and optimizer
        theirs = accelerate.Accelerator(cpu=device == "cpu")
        their_model, their_optimizer = theirs.prepare(*build(args.size_mb, device))

    def raw_save() -> float:
        out = root / f"raw{next(counter)}"
        out.mkdir()
        start = time.perf_counter()
        fsynced_save(dict(model.state_dict()), out / "model.safetensors")
        fsynced_save(optimizer_tensors(optimizer), out / "optimizer.safetensors")
        elapsed = time.perf_counter() - start
        shutil.rmtree(out)
        return elapsed

    def accel_save(async_save: bool = False) -> float:
        out = root / f"accel{next(counter)}"
        start = time.perf_counter()
        accelerator.save_state(str(out), async_save=async_save)
        elapsed = time.perf_counter() - start
        accelerator.wait_for_checkpoint()
        shutil.rmtree(out)
        return elapsed

    def accelerate_save() -> float:
        out = root / f"accelerate{next(counter)}"
        start = time.perf_counter()
        theirs.save_state(str(out))
        elapsed = time.perf_counter() - start
        shutil.rmtree(out)
        return elapsed

    save_candidates = {"raw": raw_save, "accel": accel_save}
    if accelerate is not None:
        save_candidates["accelerate"] = accelerate_save
    saves = interleaved(save_candidates, args.repeats)
    extra = {"state_mb": round(total / 2**20, 1), "device": device}
    report("checkpoint save (fsync)", "raw", "accel", saves, "s", target=1.1, extra=extra)
    if accelerate is not None:
        report("checkpoint save (Accelerate, no fsync)", "raw", "accelerate", saves, "s",
               extra=extra)

    raw_dir = root / "raw-load"
    raw_dir.mkdir()
    fsynced_save(dict(model.state_dict()), raw_dir / "model.safetensors")
    fsynced_save(optimizer_tensors(optimizer), raw_dir / "optimizer.safetensors")
    accel_dir = root / "accel-load"
    accelerator.save_state(str(accel_dir))

    def raw_load() -> float:
        start = time.perf_counter()
        load_file(raw_dir / "model.safetensors")
        load_file(raw_dir / "optimizer.safetensors")
        return time.perf_counter() - start

    skeleton = optimizer.state_dict()

    def raw_load_into(sha: bool = False) -> float:
        start = time.perf_counter()
        if sha:
            for name in ("model.safetensors", "optimizer.safetensors"):
                hashlib.sha256((raw_dir / name).read_bytes()).hexdigest()
        model.load_state_dict(load_file(raw_dir / "model.safetensors"))
        flat = load_file(raw_dir / "optimizer.safetensors")
        state = {int(i): {k: flat[f"{i}/{k}"] for k in s} for i, s in skeleton["state"].items()}
        optimizer.load_state_dict({"state": state, "param_groups": skeleton["param_groups"]})
        return time.perf_counter() - start

    def accel_load(verify: str = "full", until_verified: bool = False,
                   touch: bool = False) -> float:
        start = time.perf_counter()
        accelerator.load_state(str(accel_dir), verify=verify)
        if until_verified:
            accelerator.wait_for_checkpoint()
        if touch:
            touch_every_page(model, optimizer)
        elapsed = time.perf_counter() - start
        accelerator.wait_for_checkpoint()
        return elapsed

    def raw_load_touched() -> float:
        start = time.perf_counter()
        raw_load_into()
        touch_every_page(model, optimizer)
        return time.perf_counter() - start

    step_batch = torch.randn(args.batch, 2048, device=device)

    def first_step() -> None:  # writes every optimizer state page (Adam updates them all)
        model(step_batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    def raw_load_stepped() -> float:
        start = time.perf_counter()
        raw_load_into()
        first_step()
        return time.perf_counter() - start

    def accel_load_stepped() -> float:
        start = time.perf_counter()
        accelerator.load_state(str(accel_dir))
        first_step()
        return time.perf_counter() - start

    load_candidates = {"raw": raw_load, "raw+load_state_dict": raw_load_into,
                       "raw+load_state_dict+step": raw_load_stepped,
                       "accel+step": accel_load_stepped,
                       "raw+load_state_dict+sha256": lambda: raw_load_into(sha=True),
                       "raw+load_state_dict+touch": raw_load_touched,
                       "accel": accel_load,
                       "accel+touch": lambda: accel_load(touch=True),
                       "accel-background": lambda: accel_load("background"),
                       "accel-background-verified": lambda: accel_load("background", True)}
    if accelerate is not None:
        their_dir = root / "accelerate-load"
        theirs.save_state(str(their_dir))

        def accelerate_load() -> float:
            start = time.perf_counter()
            theirs.load_state(str(their_dir))
            touch_every_page(their_model, their_optimizer)
            return time.perf_counter() - start

        load_candidates["accelerate+touch"] = accelerate_load
    loads = interleaved(load_candidates, args.repeats)
    report("checkpoint load, every page touched, vs load_file + load_state_dict + touch",
           "raw+load_state_dict+touch", "accel+touch", loads, "s", target=1.25, extra=extra)
    if accelerate is not None:
        report("checkpoint load (Accelerate, no verification), every page touched, same floor",
               "raw+load_state_dict+touch", "accelerate+touch", loads, "s", extra=extra)
    report("checkpoint load + first training step vs load_file + load_state_dict + step",
           "raw+load_state_dict+step", "accel+step", loads, "s", target=1.05, extra=extra)
    report("checkpoint load vs lazy load_file (reads nothing)", "raw", "accel", loads, "s",
           target=1.05, extra=extra)
    report("checkpoint load vs load_file + load_state_dict", "raw+load_state_dict", "accel",
           loads, "s", target=1.05, extra=extra)
    report("checkpoint load (verify=background) vs load_file + load_state_dict",
           "raw+load_state_dict", "accel-background", loads, "s", target=1.05, extra=extra)
    report("checkpoint load (verify=background) until verified vs load_file + "
           "load_state_dict", "raw+load_state_dict", "accel-background-verified", loads, "s",
           extra=extra)
    report("checkpoint load vs load_file + load_state_dict + 1-thread sha256",
           "raw+load_state_dict+sha256", "accel", loads, "s", extra=extra)

    batch = torch.randn(args.batch, 2048, device=device)

    def train_step() -> None:
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(fn) -> float:  # noqa: ANN001
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def step_after_async_save(blocked: list[float]) -> float:
        """One training step right after an async save; records the time the loop was
        blocked (the save call + the wait for the copy at the optimizer step)."""
        out = root / f"async{next(counter)}"
        start = time.perf_counter()
        accelerator.save_state(str(out), async_save=True)
        returned = time.perf_counter()
        model(batch).square().mean().backward()
        gate = time.perf_counter()
        wait_for_staging()
        blocked.append(returned - start + time.perf_counter() - gate)
        optimizer.step()
        optimizer.zero_grad()
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        accelerator.wait_for_checkpoint()
        shutil.rmtree(out)
        return elapsed

    train_step()
    blocked: list[float] = []
    steps = interleaved({"step": lambda: timed(train_step),
                         "step+async": lambda: step_after_async_save(blocked)}, args.repeats)
    step = statistics.median(steps["step"])
    sync = statistics.median(saves["accel"])
    report("async save: loop blocked (call + wait for the copy) vs sync save", "sync",
           "async", {"sync": saves["accel"], "async": blocked}, "s", target=0.10, extra=extra)
    report("async save: time added to the next training step vs sync save", "sync", "async",
           {"sync": saves["accel"], "async": [t - step for t in steps["step+async"]]}, "s",
           extra=extra)
    print(f"(sync accel save median {sync:.3f} s; training step median {step:.3f} s)")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()

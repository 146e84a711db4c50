"""``Accelerator.save_model`` against one ``safetensors`` ``save_file``, same run.

Floor ("raw"): ``save_file`` of the whole state dict into one file, then fsync — the least
any library can do to put the weights on disk durably. Candidates: accel's
``save_model(max_shard_size=...)`` (shards written atomically, each fsynced, plus the
index) and, when it is importable (``uv run --with accelerate ...``; it is no dependency
of the project), Accelerate's ``save_model`` with the same shard size. Target: <= 1.05.

    uv run python tools/bench/bench_save_model.py --size-mb 1024                  # temp dir
    uv run python tools/bench/bench_save_model.py --size-mb 1024 --dir /dev/shm   # tmpfs
    uv run --with accelerate python tools/bench/bench_save_model.py --size-mb 1024
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import import_accelerate, interleaved, report
from safetensors.torch import save_file
from torch import nn


def build(size_mb: int) -> nn.Module:
    """An fp32 stack of Linear(2048, 2048) layers (16 MiB each) of about ``size_mb``."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(max(1, size_mb // 16))])


def fsync_tree(path: Path) -> None:
    for file in [path] if path.is_file() else sorted(path.iterdir()):
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--max-shard-size", default="256MB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    from accel import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(build(args.size_mb))
    root = Path(tempfile.mkdtemp(prefix="bench-save-model-", dir=args.dir))
    candidates = {}

    def raw() -> float:
        target = root / "raw"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        start = time.perf_counter()
        save_file(model.state_dict(), str(target / "model.safetensors"), {"format": "pt"})
        fsync_tree(target / "model.safetensors")
        return time.perf_counter() - start

    def timed_save(save, name: str):  # noqa: ANN001, ANN202
        def run() -> float:
            target = root / name
            shutil.rmtree(target, ignore_errors=True)
            start = time.perf_counter()
            save(model, target, max_shard_size=args.max_shard_size)
            return time.perf_counter() - start
        return run

    candidates["raw save_file"] = raw
    candidates["accel"] = timed_save(accelerator.save_model, "accel")
    accelerate = import_accelerate()
    if accelerate is not None:
        theirs = accelerate.Accelerator(cpu=True)
        candidates["accelerate"] = timed_save(theirs.save_model, "accelerate")
    try:
        for run in candidates.values():  # warm-up: page cache, first allocations
            run()
        samples = interleaved(candidates, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    where = "tmpfs" if str(root).startswith("/dev/shm") else "disk"
    extra = {"size_mb": args.size_mb, "max_shard_size": args.max_shard_size, "where": where}
    for name in candidates:
        if name != "raw save_file":
            report(f"save_model {args.size_mb} MB in {args.max_shard_size} shards ({where})",
                   "raw save_file", name, samples, unit="s", target=1.05, extra=extra)


if __name__ == "__main__":
    main()

"""Big-model loading and disk-offloaded inference (accel-inference), measured in one run.

1. Load: a safetensors checkpoint (``--size-mb``, default 1024) into a usable CPU model
   through ``init_empty_weights`` + ``load_checkpoint_and_dispatch`` against the floor of
   raw PyTorch: meta init + ``safetensors.torch.load_file`` + ``load_state_dict(assign=True)``.
   Target: <= 2x the floor (Accelerate measured 10-14x on this machine).
2. Disk offload: a model ``--offload-factor`` (4) times larger than the memory allowed
   (``device_map="auto"`` with a ``max_memory``), time per forward with the next block
   prefetched on a worker thread against our own no-prefetch path (Accelerate's behaviour:
   it reads each block when its forward starts). Accelerate itself is not installed here.

    uv run python tools/bench/bench_inference.py              # 1 GB
    uv run python tools/bench/bench_inference.py --size-mb 128 --repeats 3   # quick
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved, report  # noqa: E402


def _build(width: int, depth: int):  # noqa: ANN202
    from torch import nn

    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.GELU())
                           for _ in range(depth)))


def bench_load(size_mb: int, repeats: int, folder: Path) -> dict:
    import torch
    from accel_inference import init_empty_weights, load_checkpoint_and_dispatch
    from safetensors.torch import load_file, save_file

    width = 2048
    depth = max(1, size_mb * 2**20 // ((width * width + width) * 4))
    torch.manual_seed(0)
    path = folder / "model.safetensors"
    save_file(_build(width, depth).state_dict(), str(path))
    x = torch.randn(2, width)

    def floor() -> float:
        start = time.perf_counter()
        with torch.device("meta"):
            model = _build(width, depth)
        model.load_state_dict(load_file(str(path)), assign=True)
        model(x)
        return time.perf_counter() - start

    def accel() -> float:
        start = time.perf_counter()
        with init_empty_weights():
            model = _build(width, depth)
        model = load_checkpoint_and_dispatch(model, path, device_map={"": "cpu"})
        model(x)
        return time.perf_counter() - start

    floor(), accel()  # page cache warm for both
    samples = interleaved({"meta+load_file+assign": floor, "accel": accel}, repeats)
    return report("load_checkpoint_and_dispatch", "meta+load_file+assign", "accel", samples,
                  "s", target=2.0, extra={"checkpoint_mb": round(path.stat().st_size / 2**20)})


def bench_offload(repeats: int, factor: int, folder: Path, device: str = "cpu",
                  batch: int = 1) -> dict:
    import torch
    from accel_checkpoint.weights import save_model_weights
    from accel_inference import (
        compute_module_sizes,
        init_empty_weights,
        load_checkpoint_and_dispatch,
    )

    width, depth = 1024, 32
    torch.manual_seed(0)
    save_model_weights(_build(width, depth).state_dict(), folder / "offload-ckpt")
    with init_empty_weights():
        total = compute_module_sizes(_build(width, depth))[""]
    x = torch.randn(batch, width)
    # on a GPU: GPU 0 holds 1/factor of the model, the rest is read from disk per forward
    memory = {"cpu": total // factor} if device == "cpu" else {0: total // factor, "cpu": 0}
    models = {}
    for prefetch in (True, False):
        with init_empty_weights():
            model = _build(width, depth)
        models[prefetch] = load_checkpoint_and_dispatch(
            model, folder / "offload-ckpt", device_map="auto",
            max_memory=memory, offload_folder=folder / f"off-{prefetch}",
            prefetch=prefetch)
    disk = sum(1 for d in models[True].hf_device_map.values() if d == "disk")

    def timer(model):  # noqa: ANN001, ANN202
        def run() -> float:
            start = time.perf_counter()
            with torch.no_grad():
                model(x)
            if device != "cpu":
                torch.cuda.synchronize()
            return time.perf_counter() - start
        return run

    torch.testing.assert_close(models[True](x), models[False](x), rtol=0, atol=0)
    samples = interleaved({"no-prefetch": timer(models[False]),
                           "prefetch": timer(models[True])}, repeats)
    return report("disk-offloaded forward", "no-prefetch", "prefetch", samples, "s",
                  extra={"device": device, "batch": batch, "model_mb": round(total / 2**20),
                         "max_memory_mb": round(total / factor / 2**20), "disk_entries": disk,
                         "note": "Accelerate not installed: baseline is accel's own "
                         "no-prefetch path (Accelerate's disk_offload behaviour)"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--offload-factor", type=int, default=4)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-offload", action="store_true")
    parser.add_argument("--batch", type=int, default=1,
                        help="rows per forward of the offload benchmark (small: generation)")
    parser.add_argument("--device", default="cpu", help="cpu, or auto (CUDA when available): "
                        "where offloaded blocks execute")
    args = parser.parse_args()
    import torch

    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else "cpu"
    folder = Path(tempfile.mkdtemp(prefix="accel-bench-inference-"))
    try:
        if not args.skip_load:
            bench_load(args.size_mb, args.repeats, folder)
        if not args.skip_offload:
            bench_offload(args.repeats * 4, args.offload_factor, folder, device, args.batch)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""bf16 training step through ``Accelerator(mixed_precision="bf16")`` vs the raw autocast loop.

The raw loop is what a careful user writes by hand: forward under
``torch.autocast(dtype=torch.bfloat16)``, the output cast to fp32, loss and backward in
fp32, ``optimizer.step()``. accel does the same through its prepared model (autocast
forward with fp32 outputs), ``accelerator.backward`` and its optimizer wrapper. One
sample = one epoch of a small MLP over in-memory batches; the two alternate in the same
run and the ratio of medians is reported. Target: at most 1.02 (2% slower).

    uv run python tools/bench/bench_precision.py
    uv run python tools/bench/bench_precision.py --device auto   # the GPU, when present
"""

from __future__ import annotations

import argparse
import time

import torch
from accel import Accelerator
from common import interleaved, report
from torch import nn


def make_model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def epoch_runner(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list,
                 forward, backward) -> callable:
    """A function that trains one epoch over ``batches`` and returns its wall time."""
    loss_fn = nn.CrossEntropyLoss()
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def run() -> float:
        synchronize()
        start = time.perf_counter()
        for x, y in batches:
            optimizer.zero_grad()
            backward(loss_fn(forward(model, x), y))
            optimizer.step()
        synchronize()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--device", choices=["cpu", "auto"], default="cpu",
                        help="auto: the accelerator when present (tools/gpu_check.sh uses it)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=args.device == "cpu", mixed_precision="bf16")
    device = accelerator.device
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch_size, 64, generator=generator).to(device),
                torch.randint(0, 10, (args.batch_size,), generator=generator).to(device))
               for _ in range(args.steps)]

    def raw_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(x)
        return out.float()

    raw_model = make_model(args.width).to(device)
    raw_opt = torch.optim.SGD(raw_model.parameters(), lr=0.01)
    raw = epoch_runner(raw_model, raw_opt, batches, raw_forward, lambda loss: loss.backward())

    model = make_model(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    acc = epoch_runner(model, opt, batches, lambda m, x: m(x), accelerator.backward)

    raw(), acc()  # warm-up
    samples = interleaved({"raw torch.autocast": raw, "accel bf16": acc}, args.repeats)
    per_step = {k: [v / args.steps * 1e3 for v in vs] for k, vs in samples.items()}
    report(f"bf16 step ({device.type})", "raw torch.autocast", "accel bf16", per_step, unit="ms",
           target=1.02, extra={"batch_size": args.batch_size, "steps": args.steps,
                               "width": args.width, "torch": torch.__version__})


if __name__ == "__main__":
    main()

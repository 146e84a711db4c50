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

import torch
from accel import Accelerator
from common import epoch_timer, interleaved, make_mlp, report
from torch import nn


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

    raw_model = make_mlp(args.width).to(device)
    raw_opt = torch.optim.SGD(raw_model.parameters(), lr=0.01)
    raw = epoch_timer(raw_model, raw_opt, batches, lambda loss: loss.backward(), raw_forward)

    model = make_mlp(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    acc = epoch_timer(model, opt, batches, accelerator.backward)

    raw(), acc()  # warm-up
    samples = interleaved({"raw torch.autocast": raw, "accel bf16": acc}, args.repeats)
    per_step = {k: [v / args.steps * 1e3 for v in vs] for k, vs in samples.items()}
    report(f"bf16 step ({device.type})", "raw torch.autocast", "accel bf16", per_step, unit="ms",
           target=1.02, extra={"batch_size": args.batch_size, "steps": args.steps,
                               "width": args.width, "torch": torch.__version__})


if __name__ == "__main__":
    main()

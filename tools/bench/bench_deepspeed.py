"""DeepSpeed ZeRO-2 step through ``Accelerator`` against the same hand-written
``deepspeed.initialize`` loop, same run, 2 processes. Target: at most 1.02 (2% slower).

    ACCEL_DEEPSPEED_SHM_COMM=0 uv run accel launch --cpu --num_processes 2 \
        tools/bench/bench_deepspeed.py

Both engines get the same model, optimizer (AdamW), config and batches; the raw loop calls
``engine.backward(loss); engine.step()``, accel's loop is the unchanged four lines
(``accelerator.backward`` / ``optimizer.step`` / ``optimizer.zero_grad``). Epochs alternate
and the ratio of medians is reported. ``--device auto`` uses the GPU when there is one.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from accel import Accelerator
from accel.utils import DeepSpeedPlugin
from common import make_mlp, report
from torch import nn


def timer(model, optimizer, batches: list, backward, step) -> object:
    loss_fn = nn.CrossEntropyLoss()

    def run() -> float:
        start = time.perf_counter()
        for x, y in batches:
            backward(loss_fn(model(x), y))
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--device", default="cpu", choices=["cpu", "auto"])
    args = parser.parse_args()
    cpu = args.device == "cpu" or not torch.cuda.is_available()
    if cpu:
        torch.set_num_threads(1)

    config = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": args.batch_size,
              "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
              "zero_allow_untested_optimizer": True, "steps_per_print": 2**31 - 1}
    accelerator = Accelerator(cpu=cpu, deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    model = make_mlp(args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)

    import deepspeed

    raw_model = make_mlp(args.width)
    raw_engine, *_ = deepspeed.initialize(
        model=raw_model, optimizer=torch.optim.AdamW(raw_model.parameters(), lr=1e-3),
        config=dict(config, train_batch_size=args.batch_size * accelerator.num_processes))

    device = accelerator.device
    generator = torch.Generator().manual_seed(dist.get_rank())
    batches = [(torch.randn(args.batch_size, 64, generator=generator).to(device),
                torch.randint(0, 10, (args.batch_size,), generator=generator).to(device))
               for _ in range(args.steps)]

    def raw_backward(loss: torch.Tensor) -> None:
        raw_engine.backward(loss)
        raw_engine.step()

    def accel_step() -> None:
        optimizer.step()
        optimizer.zero_grad()

    candidates = {"raw deepspeed": timer(raw_engine, None, batches, raw_backward, lambda: None),
                  "accel": timer(model, optimizer, batches, accelerator.backward, accel_step)}
    for run in candidates.values():
        run()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(args.repeats):
        for name in candidates if i % 2 == 0 else reversed(list(candidates)):
            samples[name].append(candidates[name]() / args.steps * 1e3)
    if accelerator.is_main_process:
        world = accelerator.num_processes
        report(f"DeepSpeed ZeRO-2 step ({world} processes, {device.type}, w{args.width} "
               f"b{args.batch_size})", "raw deepspeed", "accel", samples, unit="ms",
               target=1.02, extra={"processes": world, "width": args.width})
    dist.barrier()


if __name__ == "__main__":
    main()

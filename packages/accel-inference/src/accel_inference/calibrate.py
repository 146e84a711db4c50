"""Measure the peak memory of real training steps on the CPU, to set beside the estimate.

Runs in a fresh process (``python -m accel_inference.calibrate``) so the peak RSS is this
model's alone: the process first warms up torch's lazy machinery (autograd, the optimizer,
autocast) on a tiny model, takes its current RSS as the baseline, then builds the model,
runs two training steps (the second is the steady state: optimizer states exist) and
reports ``peak RSS - baseline``. Prints one JSON object.

The peak is this process's own high-water mark (``VmHWM``, reset to the baseline first), not
``getrusage``'s ``ru_maxrss``: Linux carries the parent's peak RSS over ``fork``/``exec`` into
the child's ``ru_maxrss``, so a large parent (a long pytest run) inflated small models' peaks.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
from typing import Any

import torch
from torch import nn

from accel_inference.estimate import OPTIMIZERS, TrainingSetup, guess_example_inputs

__all__ = ["measure_training_peak", "make_optimizer", "main"]


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _reset_peak() -> None:
    """Restart the high-water mark at the current RSS (Linux >= 4.0; else it keeps the
    process's own peak since exec, which still excludes the parent's)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def _peak_rss() -> int:
    """This process's own peak RSS in bytes (``VmHWM``; never the parent's, unlike
    ``ru_maxrss``, which inherits it across fork/exec)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def make_optimizer(params: Any, name: str) -> torch.optim.Optimizer:
    """The optimizer ``estimate_training`` assumes (foreach: the GPU default)."""
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=1e-4, foreach=True)
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9 if name == "sgd_momentum" else 0,
                               foreach=True)
    raise ValueError(f"calibration supports {', '.join(n for n in OPTIMIZERS if n != 'adam8bit')}"
                     f", not {name!r} (8-bit Adam needs bitsandbytes and a GPU)")


def _real(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.zeros(t.shape, dtype=t.dtype) if not t.is_floating_point()
                 else torch.randn(t.shape, dtype=t.dtype) for t in inputs)


def _steps(model: nn.Module, setup: TrainingSetup, inputs: tuple[torch.Tensor, ...],
           steps: int) -> None:
    optimizer = make_optimizer(model.parameters(), setup.optimizer)
    dtype = torch.bfloat16 if setup.mixed_precision == "bf16" else torch.float16
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=setup.mixed_precision != "no"):
            loss = model(*inputs).float().pow(2).mean()
        loss.backward()
        optimizer.step()


def measure_training_peak(build: Any, setup: TrainingSetup) -> int:
    """Peak RSS growth (bytes) of building ``build()`` and training it for two steps."""
    tiny = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    _steps(tiny, setup, (torch.randn(2, 4),), 2)
    del tiny
    gc.collect()
    baseline = _rss()
    _reset_peak()
    model = build()
    inputs = guess_example_inputs(model, setup.batch_size, setup.seq_len)
    if inputs is None:
        raise ValueError(f"cannot guess the inputs of {type(model).__name__} for calibration")
    _steps(model, setup, _real(inputs), 2)
    return _peak_rss() - baseline


def main(argv: list[str] | None = None) -> int:
    from accel_inference.model_specs import build_model

    parser = argparse.ArgumentParser(prog="python -m accel_inference.calibrate")
    parser.add_argument("model")
    parser.add_argument("--library_name", default=None)
    parser.add_argument("--trust_remote_code", action="store_true")
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--mixed_precision", default="no")
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--seq_len", type=int, default=128)
    args = parser.parse_args(argv)
    setup = TrainingSetup(optimizer=args.optimizer, mixed_precision=args.mixed_precision,
                          batch_size=args.batch_size, seq_len=args.seq_len, strategy="none")
    torch.manual_seed(0)
    # one intra-op thread: every extra thread gets its own malloc arena and scratch buffers,
    # which made the measured peak vary from run to run (and the estimate does not model them)
    torch.set_num_threads(1)
    peak = measure_training_peak(lambda: build_model(
        args.model, args.library_name, args.trust_remote_code, empty=False), setup)
    print(json.dumps({"measured_peak": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared helpers of the benchmarks: interleaved repeats, medians, one report format.

Every benchmark compares accel against raw PyTorch *in the same run*, alternating the
two so machine noise hits both alike, and reports the ratio of medians.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any


def interleaved(candidates: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Call each candidate (returning one measurement) ``repeats`` times, alternating order."""
    results: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for i in range(repeats):
        for name in names if i % 2 == 0 else reversed(names):
            results[name].append(candidates[name]())
    return results


def report(benchmark: str, baseline: str, candidate: str, samples: dict[str, list[float]],
           unit: str, target: float | None = None, extra: dict | None = None) -> dict:
    """Print a one-line summary and a JSON record; return the record."""
    base = statistics.median(samples[baseline])
    cand = statistics.median(samples[candidate])
    record = {"benchmark": benchmark, "baseline": baseline, "candidate": candidate,
              f"baseline_median_{unit}": round(base, 4), f"candidate_median_{unit}": round(cand, 4),
              "ratio": round(cand / base, 4), "repeats": len(samples[baseline]), **(extra or {})}
    if target is not None:
        record["target_ratio"] = target
        record["meets_target"] = cand / base <= target
    print(f"{benchmark}: {baseline} {base:.4f} {unit}, {candidate} {cand:.4f} {unit}, "
          f"ratio {cand / base:.3f}" + (f" (target <= {target})" if target else ""))
    print("JSON " + json.dumps(record))
    return record


def import_accelerate() -> Any:
    """Hugging Face Accelerate when importable (a bench-only extra column: run the bench with
    ``uv run --with accelerate ...``; it is no dependency of the project), else None."""
    real = "uv run --with 'accelerate!=1.15.0+accel.1' ..."  # not the workspace's shim
    try:
        import accelerate
    except ImportError:
        print(f"(accelerate is not installed: its column is left out; `{real}` adds it)")
        return None
    if "+accel" in getattr(accelerate, "__version__", ""):  # packages/accelerate: accel itself
        print(f"(the importable accelerate is accel's shim, not Hugging Face Accelerate: its "
              f"column is left out; `{real}` adds the real one)")
        return None
    return accelerate


def make_mlp(width: int = 256):  # noqa: ANN201 - torch imported lazily for bench_import
    """The small MLP (64 -> width -> width -> 10) the step benchmarks train, same init each call."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def epoch_timer(model: Any, optimizer: Any, batches: Iterable, backward: Callable,
                forward: Callable | None = None, device: Any = None) -> Callable[[], float]:
    """A function that trains one epoch over ``batches`` and returns its wall time in seconds.

    ``forward(model, x)`` replaces ``model(x)`` (e.g. a hand-written autocast); ``device`` is
    where a raw loop moves its batches itself (a prepared loader already did).
    """
    import torch
    from torch import nn

    loss_fn = nn.CrossEntropyLoss()
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    move = device is not None and device.type != "cpu"

    def run() -> float:
        synchronize()
        start = time.perf_counter()
        for x, y in batches:
            if move:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            backward(loss_fn(model(x) if forward is None else forward(model, x), y))
            optimizer.step()
        synchronize()
        return time.perf_counter() - start

    return run

"""Shared helpers of the benchmarks: interleaved repeats, medians, one report format.

Every benchmark compares accel against raw PyTorch *in the same run*, alternating the
two so machine noise hits both alike, and reports the ratio of medians.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable


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

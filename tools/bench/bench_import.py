"""Import time of ``from accel import Accelerator`` against ``import torch``, same run.

Each sample is a fresh interpreter that times its own imports with perf_counter, so
interpreter start-up is excluded. Target: accel adds at most 50 ms on top of torch.

It measures the steady state a user sees: bytecode caches written. Some machines set
PYTHONDONTWRITEBYTECODE=1, which makes every import recompile its sources; the benchmark
lifts it for its subprocesses and runs one warm-up import first.

    uv run python tools/bench/bench_import.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common import interleaved

_TORCH = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"
_ACCEL = ("import time; t=time.perf_counter(); import torch; m=time.perf_counter(); "
          "from accel import Accelerator; e=time.perf_counter(); print(e-t, e-m)")


_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(code: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=_ENV)
    return [float(v) for v in out.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    accel_only: list[float] = []
    _run(_ACCEL)  # warm-up: writes the bytecode caches

    def accel_sample() -> float:
        total, extra = _run(_ACCEL)
        accel_only.append(extra)
        return total

    samples = interleaved({"import torch": lambda: _run(_TORCH)[0],
                           "import torch + accel": accel_sample}, args.repeats)
    torch_ms = statistics.median(samples["import torch"]) * 1000
    total_ms = statistics.median(samples["import torch + accel"]) * 1000
    extra_ms = statistics.median(accel_only) * 1000
    record = {"benchmark": "import", "torch_median_ms": round(torch_ms, 1),
              "torch_plus_accel_median_ms": round(total_ms, 1),
              "accel_after_torch_median_ms": round(extra_ms, 1),
              "difference_of_medians_ms": round(total_ms - torch_ms, 1), "target_ms": 50,
              "meets_target": extra_ms <= 50, "repeats": args.repeats}
    print(f"import: torch {torch_ms:.0f} ms; torch + accel {total_ms:.0f} ms; "
          f"accel after torch {extra_ms:.1f} ms (target <= 50 ms)")
    print("JSON " + json.dumps(record))


if __name__ == "__main__":
    main()

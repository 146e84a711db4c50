"""Import time of ``from accel import Accelerator`` against ``import torch``, same run.

Each sample is a fresh interpreter. Inside it, the child times its own imports (wall with
perf_counter, CPU with process_time), so interpreter start-up is excluded: "accel after
torch" is what ``from accel import Accelerator`` costs once torch is loaded, the figure the
target is about (at most 50 ms of CPU). From outside, the parent reads each child's whole
CPU time (user + system, start-up and exit included) and reports the median over pairs of
the difference to a bare ``import torch`` child run next to it.

It measures the steady state a user sees: bytecode caches written. Some machines set
PYTHONDONTWRITEBYTECODE=1, which makes every import recompile its sources; the benchmark
lifts it for its subprocesses and runs one warm-up import first.

    uv run python tools/bench/bench_import.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

from common import interleaved

_CLOCKS = "import time; w, c = time.perf_counter(), time.process_time()\n"
_TORCH = _CLOCKS + "import torch\nprint(time.perf_counter() - w)"
_ACCEL = (_CLOCKS + "import torch\nmw, mc = time.perf_counter(), time.process_time()\n"
          "from accel import Accelerator\n"
          "ew, ec = time.perf_counter(), time.process_time()\nprint(ew - w, ew - mw, ec - mc)")


_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(code: str) -> tuple[list[float], float]:
    """What the child printed, and its whole CPU time (start-up and exit included)."""
    before = _children_cpu()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=_ENV)
    return [float(v) for v in out.stdout.split()], _children_cpu() - before


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    inside_wall: list[float] = []
    inside_cpu: list[float] = []
    process_cpu: dict[str, list[float]] = {"torch": [], "accel": []}
    _run(_ACCEL)  # warm-up: writes the bytecode caches

    def torch_sample() -> float:
        (wall,), cpu = _run(_TORCH)
        process_cpu["torch"].append(cpu)
        return wall

    def accel_sample() -> float:
        (total, extra_wall, extra_cpu), cpu = _run(_ACCEL)
        inside_wall.append(extra_wall)
        inside_cpu.append(extra_cpu)
        process_cpu["accel"].append(cpu)
        return total

    samples = interleaved({"import torch": torch_sample,
                           "import torch + accel": accel_sample}, args.repeats)
    pair_cpu = [a - t for a, t in zip(process_cpu["accel"], process_cpu["torch"], strict=True)]
    cpu_ms = _ms(inside_cpu)
    record = {"benchmark": "import",
              "torch_median_ms": _ms(samples["import torch"]),
              "torch_plus_accel_median_ms": _ms(samples["import torch + accel"]),
              "accel_after_torch_cpu_median_ms": cpu_ms,
              "accel_after_torch_median_ms": _ms(inside_wall),
              "process_cpu_torch_median_ms": _ms(process_cpu["torch"]),
              "process_cpu_torch_plus_accel_median_ms": _ms(process_cpu["accel"]),
              "process_cpu_difference_median_ms": _ms(pair_cpu),
              "target_ms": 50, "meets_target": cpu_ms <= 50, "repeats": args.repeats}
    print(f"import: accel after torch {cpu_ms:.1f} ms CPU, {record['accel_after_torch_median_ms']}"
          f" ms wall (target <= 50 ms CPU); whole processes: torch "
          f"{record['process_cpu_torch_median_ms']:.0f} ms CPU, torch + accel "
          f"{record['process_cpu_torch_plus_accel_median_ms']:.0f} ms CPU, pairwise difference "
          f"{record['process_cpu_difference_median_ms']:.1f} ms")
    print("JSON " + json.dumps(record))


if __name__ == "__main__":
    main()

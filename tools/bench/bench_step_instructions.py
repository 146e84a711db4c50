"""Instructions per training step of accel against the same raw loop, counted by callgrind.

The wall-clock step benchmark (``bench_step.py``) moves by a few percent from run to run on
a shared VM. Instruction counts do not: callgrind counts the same number for the same
binary, inputs and environment whatever else the machine is doing. This runs the loops of
``bench_step.py`` (raw and accel, one process each) under ``valgrind --tool=callgrind``
with instrumentation off until a warm-up epoch is over, switches it on
(``callgrind_control``), and counts one epoch of ``--steps`` batches on the main thread.

A loop's count also moves with the process's memory layout, which shifts with the size of
its environment: three padded environments moved it by up to 0.3% here, and another
virtualenv (``uv run --with accelerate``) by 1.5%. So each loop runs in ``--layouts``
processes whose environments differ by a padding variable, the report compares the medians
(the JSON line gives every count), and only counts from one run are comparable. The count
per step is the epoch's count over ``--steps``: the epoch's start and the polling before it
are well under 0.1% of it.

Instructions are not time: code that runs between PyTorch kernels finds its data and code
evicted from the caches, so an added instruction costs more than the average one (see
docs/performance.md). The count is the repeatable half of the story.

    uv run python tools/bench/bench_step_instructions.py               # accumulate(4)
    uv run python tools/bench/bench_step_instructions.py --accumulate 1

Needs valgrind (Debian: ``apt-get install valgrind``); about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import report

KINDS = ("raw torch", "accel")


def child(kind: str, steps: int, accumulate: int, width: int, batch_size: int,
          go: Path) -> None:
    """One loop under callgrind: warm up, wait until counting is on, run one epoch, exit."""
    import torch
    from bench_step import library_timer, raw_timer
    from common import make_mlp
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    n = steps * batch_size
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))
    model = make_mlp(width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=batch_size, shuffle=False)
    if kind == "accel":
        from accel import Accelerator

        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulate)
        run = library_timer(accelerator, *accelerator.prepare(model, optimizer, loader),
                            accumulate)
    else:
        run = raw_timer(model, optimizer, loader, accumulate, torch.device("cpu"))
    run()  # warm-up, not counted
    go.with_suffix(".ready").touch()
    while not go.exists():
        time.sleep(0.005)
    run()
    os._exit(0)  # no interpreter teardown in the count


def count(kind: str, layout: int, args: argparse.Namespace, workdir: Path) -> int:
    """Instructions the main thread executes from the end of the warm-up to the exit, in an
    environment padded by ``layout`` x 1088 bytes."""
    tag = f"{kind.split()[0]}-{layout}"
    go, out = workdir / f"{tag}.go", workdir / f"{tag}.out"
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
               f"--callgrind-out-file={out}", sys.executable, __file__, "--child", kind,
               "--steps", str(args.steps), "--accumulate", str(args.accumulate), "--width",
               str(args.width), "--batch-size", str(args.batch_size), "--go", str(go)]
    env = {**os.environ, "PYTHONHASHSEED": "0",  # same dict layouts in every run
           "ACCEL_BENCH_LAYOUT_PAD": "x" * (1024 * layout + 64 * layout)}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    while not go.with_suffix(".ready").exists():
        if process.poll() is not None:
            raise RuntimeError(f"{tag} exited before counting: {process.stderr.read()[-2000:]}")
        time.sleep(0.2)
    subprocess.run(["callgrind_control", "--instr=on", str(process.pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    go.touch()
    process.wait()
    main_thread = out.with_name(out.name + "-01")
    for line in main_thread.read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {main_thread}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="batches in the counted epoch")
    parser.add_argument("--layouts", type=int, default=3,
                        help="processes per loop, each with a differently padded environment")
    parser.add_argument("--accumulate", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--go", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.steps, args.accumulate, args.width, args.batch_size,
                     args.go)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind); this benchmark "
                 "counts instructions with its callgrind tool.")
    workdir = Path(tempfile.mkdtemp(prefix="bench-instr-"))
    jobs = [(kind, layout) for layout in range(args.layouts) for kind in KINDS]
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(jobs, pool.map(lambda j: count(*j, args, workdir), jobs),
                              strict=True))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    per_step = {kind: [counts[kind, layout] / args.steps for layout in range(args.layouts)]
                for kind in KINDS}
    kind = "step" if args.accumulate == 1 else f"accumulate({args.accumulate}) micro-step"
    report(f"instructions per {kind} (1 process, cpu, w{args.width} b{args.batch_size})",
           "raw torch", "accel", per_step, unit="instructions", target=1.03,
           extra={"steps": args.steps,
                  "per_layout": {k: [round(v) for v in vs] for k, vs in per_step.items()}})


if __name__ == "__main__":
    main()

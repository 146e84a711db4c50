"""`accel launch` vs `torchrun`: wall time from the command to the first training step.

Both start the same 2-process worker (plain DDP on gloo, no accel import, so only the
launchers differ); the worker writes the wall-clock time when its first optimizer step is
done. Launches alternate between the two; the report is the ratio of medians (target
<= 1.02x). Run on an idle machine: `uv run python tools/bench/bench_launch.py`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import interleaved, report  # noqa: E402

WORKER = textwrap.dedent("""
    import sys, time
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(8, 64)).square().mean()
    loss.backward()
    opt.step()
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            f.write(repr(time.time()))
    dist.destroy_process_group()
""")


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return str(sock.getsockname()[1])


def _timer(command: list[str], stamp: Path) -> float:
    command = [_free_port() if part == "PORT" else part for part in command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env["OMP_NUM_THREADS"] = "1"
    start = time.time()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return float(stamp.read_text()) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        worker = Path(tmp) / "worker.py"
        worker.write_text(WORKER)
        stamp = Path(tmp) / "first_step"
        accel = [sys.executable, "-m", "accel_launch", "launch", "--cpu", "--num_processes",
                 "2", "--quiet", str(worker), str(stamp)]
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    "--rdzv_backend", "static", "--master_port", "PORT", "--monitor_interval",
                    "0.1", str(worker), str(stamp)]
        samples = interleaved({"torchrun": lambda: _timer(torchrun, stamp),
                               "accel launch": lambda: _timer(accel, stamp)}, opts.repeats)
    report("launch_to_first_step", "torchrun", "accel launch", samples, "s", target=1.02)


if __name__ == "__main__":
    main()

"""`accel launch`'s hang watchdog end to end: two gloo workers, rank 1 stops stepping while
rank 0 waits in the gradient all-reduce. The launcher must end the job soon after the stall
limit, name rank 1 (not rank 0, the one waiting) and show the line rank 1 sleeps on. The
rules behind it are unit-tested in packages/accel-launch/tests/test_watchdog.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

STALL = 5


def test_a_hung_rank_is_named_with_its_stack_and_the_job_ends(
        tmp_path: Path, launch, explain, scripts: Path) -> None:
    script = scripts / "launch_hang.py"
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1)
                if "time.sleep(10**6)" in text)
    began = tmp_path / "hang_began"
    proc = launch("--cpu", "--num_processes", "2", "--stall_timeout", str(STALL),
                  str(script), str(began), timeout=150)
    ended = time.time()
    assert proc.returncode == 124, explain(proc)
    assert ended - float(began.read_text()) < STALL + 12, explain(proc)  # limit + a few s
    err = proc.stderr
    # every rank's stack, the rank that stopped first first, with its sleeping line
    assert "--- rank 1 (local rank 1, pid" in err and "2 steps; stopped first ---" in err, err
    assert err.index("--- rank 1 ") < err.index("--- rank 0 "), err
    assert f'launch_hang.py", line {line} in <module>' in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("accel launch: error: the job hung: rank 1 (local rank 1, pid"), err
    assert "after 2 steps (the others reached 3)" in last
    assert f"launch_hang.py:{line} in <module>" in last
    assert "rank 0 exited" not in err and "Received 15 death signal" not in err

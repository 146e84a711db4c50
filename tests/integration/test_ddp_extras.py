"""DDP's extras with 2 real processes: LocalSGD averages every N steps and not between,
join_uneven_inputs lets ranks with fewer batches finish, compression hooks train."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


def test_local_sgd_join_and_comm_hooks(explain, launch, scripts):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "ddp_extras.py"))
    assert proc.returncode == 0, explain(proc)
    for check in ("local_sgd", "join_uneven_inputs", "comm_hook fp16", "comm_hook bf16",
                  "comm_hook power_sgd"):
        assert proc.stdout.count(f"ok {check}\n") == 2, explain(proc)  # both ranks

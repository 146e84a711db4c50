"""A load that fails on one rank changes nothing on any rank: DDP through the Accelerator
(replicated layout) and FSDP2 through the per-rank DCP layout, 2 processes (one shared
launch: scripts/checkpoint_failed_load.py). Single-process stages are in
packages/accel/tests/test_load_state_all_or_nothing.py and
packages/accel-checkpoint/tests/test_failed_load_rollback.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("checkpoint_failed_load.py", "{out}")
def test_a_load_failing_on_one_rank_is_put_back_on_every_rank(explain, shared_launch):
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for rank, error in ((0, "peer"), (1, "own")):
        assert f"DDP-FAILED rank={rank} error={error} unchanged=True" in proc.stdout, \
            explain(proc)
        assert f"DDP-GOOD rank={rank} loaded=True counter=2 step=2" in proc.stdout, \
            explain(proc)
        assert f"FSDP2-FAILED rank={rank} error={error} unchanged=True" in proc.stdout, \
            explain(proc)

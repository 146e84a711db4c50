"""gather_for_metrics on 2 processes for every split_batches / dispatch_batches /
even_batches combination, with uneven last batches (issue 37.4; see gather_checks.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("gather_checks.py")
def test_gather_for_metrics_keeps_exactly_the_dataset_in_every_mode(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch,
    # which has the timeout). 4 datasets x 8 combinations, less the 4 split cases of an odd
    # batch size: 28 cases. In 6 the ranks take different numbers of steps, so no per-step
    # collective can run (as in Accelerate): even_batches off, not dispatched, with the
    # batches dealt in turn (37/8, 33/4, 19/4) or split with a final step of 1 sample
    # (33/4, also dispatched, where that sample goes to one process)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"GATHER-OK rank={rank} cases=22 uneven=6" in proc.stdout, explain(proc)

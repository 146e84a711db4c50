"""A RankCheckpointWriter of the test's own in 2 processes: the per-rank protocol (each
rank's files, corruption refused on every rank, a failure on one rank commits nothing)
and the Accelerator saving through the writer its strategy hands over.

One run (see scripts/checkpoint_per_rank.py, in the launch it shares with other check
scripts: conftest's shared_launch); single-process cases are in
packages/accel-checkpoint/tests/test_per_rank.py and test_checkpoint_layouts.py.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("checkpoint_per_rank.py", "{out}")
def test_custom_writer_in_two_processes(explain, shared_launch):
    from accel_checkpoint.manifest import verify_checkpoint

    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert (f"PER-RANK rank={rank} own=True listed=True world=2 layout=test-safetensors "
                "step=3") in proc.stdout, explain(proc)
        assert f"CORRUPT-REFUSED rank={rank} file=rank1.safetensors loads=0" in proc.stdout, \
            explain(proc)
        assert (f"RANK-FAILURE rank={rank} named=True kept=True "
                "left=['broken', 'ckpt', 'facade']") in proc.stdout, explain(proc)
        assert f"FACADE rank={rank} exact=True state=True layout=test-safetensors" in \
            proc.stdout, explain(proc)
    manifest = verify_checkpoint(tmp_path / "facade", deep=True)
    assert manifest.metadata["sharded_objects"] == {"model": "model", "optimizer": "optimizer"}
    assert {"rank0.safetensors", "rank1.safetensors", "scheduler.json"} <= set(manifest.files)

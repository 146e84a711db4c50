"""accel-data in 2 real processes: two launches that each check a lot (see data_checks.py;
the second also runs data_groups.py's checks after the resume)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def data_launches(launch, scripts, tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The saving launch, then the resuming one in new processes, which goes on with the
    process-group checks (two launches for the two tests below)."""
    out: Path = tmp_path_factory.mktemp("data")
    script = str(scripts / "data_checks.py")
    saved = launch("--cpu", "--num_processes", "2", script, str(out), "save")
    resumed = launch("--cpu", "--num_processes", "2", script, str(out), "resume", "groups")
    return saved, resumed


def test_every_sharding_mode_gathers_exactly_and_resumes_in_new_processes(explain,
                                                                          data_launches):
    saved, resumed = data_launches
    assert saved.returncode == 0, explain(saved)
    for rank in (0, 1):
        # 64 configurations; 4 of them give the ranks unequal batch counts (even_batches
        # off, not dispatched: a dispatched final step is cut as Accelerate cuts it, so
        # every rank gets a part as long as it holds one sample per process)
        assert f"DATA-SAVE-OK rank={rank} cases=64 lockstep=60" in saved.stdout, explain(saved)
    for rank in (0, 1):
        assert f"DATA-RESUME-OK rank={rank} cases=64" in resumed.stdout, explain(resumed)


def test_two_processes_see_what_one_process_sees_with_the_whole_batch(explain, data_launches):
    # data_checks.check_union: 2 ranks x batch b, step by step, are 1 process x batch 2b
    # (Accelerate's multi-process test), dispatch_batches on and off, split_batches,
    # even_batches, drop_last, shuffling with and without the seedable sampler
    saved, _ = data_launches
    assert saved.returncode == 0, explain(saved)
    for rank in (0, 1):
        assert f"DATA-UNION-OK rank={rank} cases=96" in saved.stdout, explain(saved)
    # data_checks.check_regression: Accelerate's training_check (a regression model on a
    # generator-seeded shuffling loader, seedable sampler on and off, split_batches on and
    # off) trains the 1-process model on 2 processes
    for rank in (0, 1):
        assert f"DATA-REGRESSION-OK rank={rank}" in saved.stdout, explain(saved)


def test_data_parallel_groups_keep_collectives_and_loaders_inside_them(explain, data_launches):
    # 2 processes, each alone in its data-parallel group (tensor parallel degree 2), plus a
    # group of both; see data_groups.py (run by the resuming launch, after its own checks)
    _, proc = data_launches
    assert "DATA-RESUME-OK rank=0" in proc.stdout, (
        "the process-group checks did not run: the resume before them failed\n" + explain(proc))
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"DATA-GROUPS-OK rank={rank}" in proc.stdout, explain(proc)

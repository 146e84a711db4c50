"""accel-data in 2 real processes: two launches that each check a lot (see data_checks.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess



def test_every_sharding_mode_gathers_exactly_and_resumes_in_new_processes(explain, launch, scripts,
                                                                          tmp_path):
    script = str(scripts / "data_checks.py")
    saved = launch("--cpu", "--num_processes", "2", script, str(tmp_path), "save")
    assert saved.returncode == 0, explain(saved)
    for rank in (0, 1):
        # 64 configurations; 8 of them give the ranks unequal batch counts (even_batches off)
        assert f"DATA-SAVE-OK rank={rank} cases=64 lockstep=56" in saved.stdout, explain(saved)
    resumed = launch("--cpu", "--num_processes", "2", script, str(tmp_path), "resume")
    assert resumed.returncode == 0, explain(resumed)
    for rank in (0, 1):
        assert f"DATA-RESUME-OK rank={rank} cases=64" in resumed.stdout, explain(resumed)


def test_data_parallel_groups_keep_collectives_and_loaders_inside_them(explain, launch, scripts):
    # 2 processes, each alone in its data-parallel group (tensor parallel degree 2), plus a
    # group of both; see data_groups.py
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "data_groups.py"))
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"DATA-GROUPS-OK rank={rank}" in proc.stdout, explain(proc)

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

"""Pipeline-parallel training (ParallelismConfig(pp_size=2)) with real processes (gloo)
through `accel launch`: every schedule (and its forward-only evaluation), and 2 stages x DP 2
with save/load/resume (strict=False too), equal to one process, and 2 x 2 interleaved stages
x TP 2 (scripts/pipeline_train.py says what each line checks)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.multiprocess


def test_three_schedules_on_two_processes_equal_one_process(explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "pipeline_train.py"),
                  "schedules", str(tmp_path), timeout=300)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    for rank in (0, 1):
        for schedule in ("gpipe", "1f1b", "interleaved_1f1b"):
            assert f"SCHEDULE-{schedule}-OK rank={rank}" in out, explain(proc)
            assert f"EVAL-{schedule}-OK rank={rank}" in out, explain(proc)
        assert f"CONTRACT-OK rank={rank}" in out, explain(proc)
        assert f"NON-STRICT-OK rank={rank}" in out, explain(proc)
        assert f"EVAL-MODE-OK rank={rank}" in out, explain(proc)
        assert f"CLIP-OK rank={rank}" in out, explain(proc)
        assert f"REFUSALS-OK rank={rank}" in out, explain(proc)
        assert f"SPLIT-ERROR-OK rank={rank}" in out, explain(proc)
    for schedule in ("gpipe", "1f1b", "interleaved_1f1b"):
        assert f"STATE-DICT-{schedule}-OK rank=0" in out, explain(proc)
    if importlib.util.find_spec("transformers") is not None:
        assert "HF-LLAMA-OK rank=0" in out and "HF-LLAMA-OK rank=1" in out, explain(proc)
    assert out.count("PIPELINE-schedules-DONE") == 2, explain(proc)


def test_two_stages_times_dp2_on_four_processes_and_exact_resume(explain, launch, scripts,
                                                                 tmp_path):
    proc = launch("--cpu", "--num_processes", "4", str(scripts / "pipeline_train.py"),
                  "pp_dp", str(tmp_path), timeout=420)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    for rank in range(4):
        for check in ("PP-REPLICATE", "PP-TP", "PP-FSDP", "RESUME", "PP-FSDP-EVAL"):
            assert f"{check}-OK rank={rank}" in out, explain(proc)
    assert out.count("PIPELINE-pp_dp-DONE") == 4, explain(proc)


@pytest.mark.shared_launch("pipeline_resume.py", "save", "{out}", "gpipe")
def test_a_staged_checkpoint_resumes_in_fresh_launches_at_any_split(explain, shared_launch,
                                                                    launch, run_here, scripts):
    # saved by 2 GPipe stages in the launch shared with other check scripts
    proc, out = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    assert "SAVED-OK rank=0" in proc.stdout and "SAVED-OK rank=1" in proc.stdout, explain(proc)
    # a fresh launch: the same split bitwise, then 4 interleaved stages (another split)
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "pipeline_resume.py"),
                  "resume", str(out), "gpipe:exact", "interleaved:close", timeout=300)
    assert proc.returncode == 0, explain(proc)
    for split in ("gpipe", "interleaved"):
        assert all(f"RESUMED-{split}-OK rank={r}" in proc.stdout for r in (0, 1)), explain(proc)
    # no pipeline at all: one process (in the test's own) reads the stages' checkpoint
    run_here(scripts / "pipeline_resume.py", "resume", str(out), "single:close")

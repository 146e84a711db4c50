"""A DeepSpeed ZeRO-2 checkpoint into models that are not DeepSpeed engines
(scripts/deepspeed_across.py): saved by 2 DeepSpeed processes, loaded by 2 DDP processes
(weights equal, the next step equal to the DeepSpeed run's) and, in one process, by a
plain model and an FSDP2 model."""

from __future__ import annotations

from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "deepspeed_across.py"


@pytest.mark.multiprocess
def test_zero2_checkpoint_loads_into_ddp_and_one_process(ds_launcher, explain, run_here,
                                                         tmp_path, capsys):
    saved = ds_launcher("--cpu", "--num_processes", "2", str(SCRIPT), "save", str(tmp_path))
    assert saved.returncode == 0, explain(saved, tail=6000)
    loaded = ds_launcher("--cpu", "--num_processes", "2", str(SCRIPT), "load", str(tmp_path))
    assert loaded.returncode == 0, explain(loaded, tail=6000)
    for rank in (0, 1):
        assert f"DS-INTO-DDP rank={rank} equal=True next=True" in loaded.stdout, explain(loaded)
    run_here(SCRIPT, "plain", str(tmp_path))
    out = capsys.readouterr().out
    assert "DS-INTO-PLAIN equal=True state=['exp_avg', 'exp_avg_sq', 'step']" in out, out
    assert "DS-INTO-FSDP sharded=True equal=True" in out, out

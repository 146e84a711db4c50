"""fp16 with FSDP2: a loss scaler whose inf/nan check agrees across the shards (2 processes)."""

from __future__ import annotations

import pytest


@pytest.mark.multiprocess
def test_fsdp_fp16_skips_together_trains_and_restores_the_scale(explain, launch, scripts,
                                                                   tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "fsdp_fp16.py"),
                  str(tmp_path / "checkpoint"))
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"FSDP-FP16-OK rank={rank}" in proc.stdout, explain(proc)
    assert "non-scalar tensor with numel=1" not in proc.stderr, explain(proc)

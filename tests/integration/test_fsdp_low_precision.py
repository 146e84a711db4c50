"""fp16 and fp8 with FSDP2 (2 processes): a loss scaler whose inf/nan check agrees across
the shards, and torchao's fp8 all-gather of the sharded weights."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.multiprocess
@pytest.mark.shared_launch("fsdp_low_precision.py", "{out}/checkpoint")
def test_fsdp_fp16_skips_together_and_fp8_all_gathers(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"FSDP-FP16-OK rank={rank}" in proc.stdout, explain(proc)
        if importlib.util.find_spec("torchao") is not None:
            assert f"FSDP-FP8-OK rank={rank}" in proc.stdout, explain(proc)
    assert "non-scalar tensor with numel=1" not in proc.stderr, explain(proc)

"""Ulysses sequence parallelism through the Accelerator with real processes (gloo): the tiny
Llama with sp_size=2 on 2 processes (and a transformers Llama through its attention
interface, a sequence length that does not divide, and save_state / load_state halfway with
an exact resume), and sp_size=2 x dp_shard_size=2 on 4; logits, gradients, the loss of every
step and the final weights equal to the same model trained in one process
(tests/integration/scripts/sp_checks.py)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.multiprocess
def test_sp2_matches_one_process_for_the_tiny_llama_and_a_transformers_llama(
        explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "sp_checks.py"), "2",
                  str(tmp_path), timeout=300)
    assert proc.returncode == 0, explain(proc, tail=6000)
    for rank in range(2):
        assert f"SP-OK rank={rank}" in proc.stdout, explain(proc, tail=6000)
        assert f"SP-RESUME-OK rank={rank}" in proc.stdout, explain(proc, tail=6000)
        if importlib.util.find_spec("transformers") is not None:
            assert f"SP-HF-OK rank={rank}" in proc.stdout, explain(proc, tail=6000)


@pytest.mark.multiprocess
def test_sp2_with_fsdp2_over_two_shards_matches_one_process(explain, launch, scripts):
    proc = launch("--cpu", "--num_processes", "4", str(scripts / "sp_checks.py"), "4",
                  timeout=300)
    assert proc.returncode == 0, explain(proc, tail=6000)
    for rank in range(4):
        assert f"SP-OK rank={rank}" in proc.stdout, explain(proc, tail=6000)

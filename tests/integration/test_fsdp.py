"""FSDP2 through the Accelerator: the plugin and environment choose it, and it trains,
clips, accumulates and checkpoints like DDP (2 real processes)."""

from __future__ import annotations

import pytest
from accel import Accelerator
from accel_state import ConfigurationError


def test_fsdp_plugin_must_be_the_plugin_class():
    with pytest.raises(ConfigurationError, match="must be a FullyShardedDataParallelPlugin"):
        Accelerator(cpu=True, fsdp_plugin={"sharding_strategy": "FULL_SHARD"})


def test_accelerate_use_fsdp_selects_fsdp_and_one_process_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "SHRAD_GRAD_OP")
    with pytest.raises(ConfigurationError, match="SHRAD_GRAD_OP"):
        Accelerator(cpu=True)  # the plugin is built from FSDP_* and checks them
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP")
    with pytest.raises(ConfigurationError, match="accel launch --num_processes"):
        Accelerator(cpu=True)


@pytest.mark.multiprocess
def test_fsdp_matches_ddp_and_checkpoints_in_two_processes(explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "2", str(scripts / "fsdp_checks.py"),
                  str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    assert "FSDP-OK rank=0" in proc.stdout and "FSDP-OK rank=1" in proc.stdout, explain(proc)


@pytest.mark.multiprocess
def test_fsdp_example_trains(explain, launch, repo):
    proc = launch("--cpu", "--num_processes", "2", str(repo / "examples" / "fsdp.py"))
    assert proc.returncode == 0, explain(proc)
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("epoch ")]
    assert len(losses) == 5 and losses[-1] < losses[0] * 0.5, explain(proc)
    assert "strategy fsdp, distributed type FSDP" in proc.stdout, explain(proc)
    assert "sharded checkpoint saved and loaded" in proc.stdout, explain(proc)

"""FSDP2 through the Accelerator: the plugin and environment choose it, and it trains,
clips, accumulates and checkpoints like DDP (2 real processes)."""

from __future__ import annotations

import pytest
from accel import Accelerator
from accel_state import ConfigurationError


def test_fsdp_plugin_must_be_the_plugin_class():
    with pytest.raises(ConfigurationError, match="must be a FullyShardedDataParallelPlugin"):
        Accelerator(cpu=True, fsdp_plugin={"sharding_strategy": "FULL_SHARD"})


def test_accelerate_use_fsdp_selects_fsdp_from_the_environment(monkeypatch):
    import torch
    import torch.distributed as dist
    from accel_state import DistributedType

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "SHRAD_GRAD_OP")
    with pytest.raises(ConfigurationError, match="SHRAD_GRAD_OP"):
        Accelerator(cpu=True)  # the plugin is built from FSDP_* and checks them
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP")
    try:
        accelerator = Accelerator(cpu=True)  # one process: FSDP2 on a group of its own
        assert accelerator.distributed_type == DistributedType.FSDP
        assert accelerator.strategy.plugin.reshard_after_forward is False
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        assert accelerator.strategy.checkpoint_format([model]) == "sharded"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.multiprocess
@pytest.mark.shared_launch("fsdp_checks.py", "{out}")
def test_fsdp_matches_ddp_checkpoints_and_reshards(explain, shared_launch, launch, run_here,
                                                   scripts, capsys):
    # fsdp_checks.py in the launch shared with other check scripts (conftest's shared_launch)
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    assert "FSDP-OK rank=0" in proc.stdout and "FSDP-OK rank=1" in proc.stdout, explain(proc)
    # resharding: the 2-process checkpoint into 1 process, and that one's back into 2
    # (the one-process side runs here, in the test's process: no launcher and worker to start)
    run_here(scripts / "fsdp_reshard.py", str(tmp_path / "fsdp"),
             str(tmp_path / "fsdp_output.pt"), str(tmp_path / "one"))
    one = capsys.readouterr().out
    assert "RESHARD-OK world=1" in one, one
    two = launch("--cpu", "--num_processes", "2", str(scripts / "fsdp_reshard.py"),
                 str(tmp_path / "one"), str(tmp_path / "one_output.pt"), str(tmp_path / "two"))
    assert two.returncode == 0, explain(two)
    assert "RESHARD-OK world=2 rank=1" in two.stdout, explain(two)


@pytest.mark.multiprocess
@pytest.mark.shared_launch("examples/fsdp.py")
def test_fsdp_example_trains(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("epoch ")]
    assert len(losses) == 5 and losses[-1] < losses[0] * 0.5, explain(proc)
    assert "strategy fsdp, distributed type FSDP" in proc.stdout, explain(proc)
    assert "sharded checkpoint saved and loaded" in proc.stdout, explain(proc)

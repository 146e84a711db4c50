"""DeepSpeed keeps the groups it cloned from the world for the life of the process; a second
process group in the same process (a notebook, a second run in one interpreter) must not
meet the first one's dead clones."""

from __future__ import annotations

import pytest
import torch
from accel_parallel.deepspeed import runtime as deepspeed_runtime


def test_a_new_process_group_gets_new_deepspeed_groups(monkeypatch):
    pytest.importorskip("deepspeed")
    import torch.distributed as dist
    from deepspeed.utils import groups

    if dist.is_initialized():
        pytest.skip("a process group of another test is alive in this process")
    monkeypatch.setenv("LOCAL_RANK", "0")
    cpu = torch.device("cpu")
    try:
        deepspeed_runtime.ensure_process_group(cpu)
        first = groups._clone_world_group()
        dist.destroy_process_group()
        deepspeed_runtime.ensure_process_group(cpu)
        second = groups._clone_world_group()
        assert second is not first
        assert dist.get_process_group_ranks(second) == [0]  # registered in the new world
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        groups._WORLD_GROUP = None

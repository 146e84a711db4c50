"""N-D parallelism through the Accelerator with real processes (gloo): tensor parallelism on
2 processes, TP × FSDP2, HSDP and TP × replicas on 4 — each equal to the single-process model
trained on the same batches — and the refusals that need no second process."""

from __future__ import annotations

import pytest
import torch
from accel import Accelerator, ParallelismConfig
from accel_state import ConfigurationError


@pytest.mark.multiprocess
@pytest.mark.shared_launch("tp_checks.py", "{out}")
def test_tensor_parallel_matches_one_process_and_checkpoints(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc = shared_launch
    assert proc.returncode == 0, explain(proc)
    assert "TP-OK rank=0" in proc.stdout and "TP-OK rank=1" in proc.stdout, explain(proc)


@pytest.mark.multiprocess
def test_tp_fsdp_hsdp_and_replicas_match_one_process(explain, launch, scripts, tmp_path):
    proc = launch("--cpu", "--num_processes", "4", str(scripts / "nd_checks.py"), str(tmp_path),
                  timeout=300)
    assert proc.returncode == 0, explain(proc, tail=6000)
    for rank in range(4):
        assert f"ND-OK rank={rank}" in proc.stdout, explain(proc, tail=6000)


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def test_sizes_that_do_not_span_the_world_are_refused():
    try:
        with pytest.raises(ConfigurationError, match=r"dp_shard_size=2.*tp_size=2.*spans 4 "
                                                     r"process\(es\), but this run has 1"):
            Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_shard_size=2,
                                                                       tp_size=2))
    finally:
        _destroy()


def test_context_parallel_on_cpu_is_refused():
    try:
        with pytest.raises(ConfigurationError, match=r"cp_size=2\) needs CUDA.*cpu"):
            Accelerator(cpu=True, parallelism_config=ParallelismConfig(cp_size=2))
    finally:
        _destroy()


def test_one_process_configuration_reads_the_environment_and_ranks_are_zero(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "1")
    try:
        accelerator = Accelerator(cpu=True)
        assert accelerator.strategy.name == "nd"
        config = accelerator.parallelism_config
        assert isinstance(config, ParallelismConfig) and config.total_size == 1
        assert accelerator.torch_device_mesh.mesh_dim_names == ("dp_replicate",)
        assert (accelerator.data_parallel_rank, accelerator.data_parallel_shard_rank,
                accelerator.tensor_parallel_rank, accelerator.context_parallel_rank,
                accelerator.pipeline_parallel_rank) == (0, 0, 0, 0, 0)
        assert not accelerator.is_composable_parallelism_enabled
        model = accelerator.prepare(torch.nn.Linear(3, 3))
        with accelerator.maybe_context_parallel(buffers=[torch.ones(2, 4)], buffer_seq_dims=[1]):
            out = model(torch.ones(2, 3))  # cp off: a no-op block
        assert out.shape == (2, 3)
    finally:
        _destroy()


def test_plain_run_has_no_mesh_and_zero_ranks():
    accelerator = Accelerator(cpu=True)
    assert accelerator.torch_device_mesh is None and accelerator.parallelism_config is None
    assert accelerator.tensor_parallel_rank == 0 and accelerator.data_parallel_rank == 0
    assert accelerator.should_save_model


def test_parallelism_arguments_must_be_the_right_classes():
    with pytest.raises(ConfigurationError, match="must be a ParallelismConfig"):
        Accelerator(cpu=True, parallelism_config={"tp_size": 2})
    with pytest.raises(ConfigurationError, match="must be a TorchTensorParallelPlugin"):
        Accelerator(cpu=True, torch_tp_plugin=2)

"""Ulysses sequence parallelism at the facade: Accelerate's names at its paths, and
``Accelerator(parallelism_config=ParallelismConfig(sp_size>1))`` with a DeepSpeed plugin (the
backend Accelerate runs it on) refused with what to use instead. (Training with it runs in
tests/integration/test_sequence_parallel.py.)"""

from __future__ import annotations

import pytest
from accel import Accelerator, DeepSpeedPlugin, ParallelismConfig
from accel_state import ConfigurationError


@pytest.fixture(autouse=True)
def _no_parallelism_env(monkeypatch):
    for name in ("SP_SIZE", "SP_BACKEND", "SP_SEQ_LENGTH", "SP_SEQ_LENGTH_IS_VARIABLE",
                 "SP_ATTN_IMPLEMENTATION"):
        monkeypatch.delenv(f"PARALLELISM_CONFIG_{name}", raising=False)
        monkeypatch.delenv(f"ACCEL_PARALLELISM_CONFIG_{name}", raising=False)
    yield
    import torch.distributed as dist

    if dist.is_initialized():  # a refused Accelerator may have started the group
        dist.destroy_process_group()


def test_the_config_is_accel_parallels_at_accelerates_paths():
    import accel.utils
    import accel.utils.dataclasses
    import accel_parallel

    assert accel.utils.DeepSpeedSequenceParallelConfig is \
        accel_parallel.DeepSpeedSequenceParallelConfig
    assert accel.utils.dataclasses.DeepSpeedSequenceParallelConfig is \
        accel_parallel.DeepSpeedSequenceParallelConfig


def test_sp_with_a_deepspeed_plugin_is_refused_naming_the_mesh_instead():
    from accel.utils import DeepSpeedSequenceParallelConfig

    config = ParallelismConfig(sp_backend="deepspeed", sp_size=2, sp_handler=(
        DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=True,
                                        sp_attn_implementation="sdpa")))
    with pytest.raises(ConfigurationError, match=r"sp_size=2, sp_backend='deepspeed'\) with a "
                                                 r"DeepSpeed plugin.*Drop the DeepSpeed plugin"):
        Accelerator(cpu=True, parallelism_config=config,
                    deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))


def test_sp_without_deepspeed_reaches_the_mesh_which_checks_the_world():
    config = ParallelismConfig(sp_size=2)
    with pytest.raises(ConfigurationError, match=r"sp_size=2.*spans 2 process\(es\), but this "
                                                 r"run has 1"):
        Accelerator(cpu=True, parallelism_config=config)

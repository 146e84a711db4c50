"""Ulysses sequence parallelism at the facade: Accelerate's names at its paths, and
``Accelerator(parallelism_config=ParallelismConfig(sp_size>1))`` refused with what is missing,
with or without a DeepSpeed plugin (the backend Accelerate runs it on)."""

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


def test_the_config_is_accel_parallels_at_accelerates_paths():
    import accel.utils
    import accel.utils.dataclasses
    import accel_parallel

    assert accel.utils.DeepSpeedSequenceParallelConfig is \
        accel_parallel.DeepSpeedSequenceParallelConfig
    assert accel.utils.dataclasses.DeepSpeedSequenceParallelConfig is \
        accel_parallel.DeepSpeedSequenceParallelConfig


@pytest.mark.parametrize("with_deepspeed", [False, True])
def test_an_accelerator_with_sp_is_refused_before_any_strategy(with_deepspeed):
    from accel.utils import DeepSpeedSequenceParallelConfig

    config = ParallelismConfig(sp_backend="deepspeed", sp_size=2, sp_handler=(
        DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=True,
                                        sp_attn_implementation="sdpa")))
    extra = {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=2)} if with_deepspeed else {}
    with pytest.raises(ConfigurationError, match=r"sp_size=2, sp_backend='deepspeed'\) asks for "
                                                 r"ALST/Ulysses.*DeepSpeed strategy"):
        Accelerator(cpu=True, parallelism_config=config, **extra)

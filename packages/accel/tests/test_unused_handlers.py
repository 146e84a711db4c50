"""Nothing given to the Accelerator is silently ignored (issue 40.3): a plugin or handler no
selected strategy or component takes is an error, or a warning naming it where Accelerate
ignores it without a word (its scripts pass those whatever they run under)."""

from __future__ import annotations

import warnings

import pytest
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.utils import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from accel_state import ConfigurationError


@pytest.mark.parametrize(("handler", "mixed_precision", "message", "here"), [
    (DistributedDataParallelKwargs(find_unused_parameters=True), None,
     r"kwargs_handlers=\[DistributedDataParallelKwargs\(\.\.\.\)\] is not used: strategy "
     r"'single' \(chosen by the configuration, priority 0\) does not take it; strategies that "
     r"do: ddp, nd, pipeline", True),
    (InitProcessGroupKwargs(), None,
     r"kwargs_handlers=\[InitProcessGroupKwargs\(\.\.\.\)\] is not used: this run has one "
     r"process", True),
    (GradScalerKwargs(), "bf16", r"GradScalerKwargs is ignored: mixed_precision='bf16'", False),
    (AutocastKwargs(), "no", r"AutocastKwargs is ignored: mixed_precision='no'", False),
])
def test_what_accelerate_ignores_is_named_in_a_warning(handler, mixed_precision, message, here):
    with pytest.warns(UserWarning, match=message) as caught:
        Accelerator(cpu=True, mixed_precision=mixed_precision, kwargs_handlers=[handler])
    if here:  # it points at the user's Accelerator(...) line
        assert caught[0].filename == __file__


def test_a_handler_that_is_used_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[AutocastKwargs()])


def test_a_plugin_the_named_strategy_does_not_run_with_is_refused(monkeypatch):
    with pytest.raises(ConfigurationError, match=r"^The fsdp plugin \(fsdp_plugin= or accel "
                                                 r"launch --use_fsdp\) is not used: strategy "
                                                 r"'single' \(named by Accelerator\(strategy="
                                                 r"\.\.\.\)\) does not run with it"):
        Accelerator(cpu=True, strategy="single", fsdp_plugin=FullyShardedDataParallelPlugin())
    monkeypatch.setenv("ACCEL_STRATEGY", "single")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accel launch --use_fsdp
    with pytest.raises(ConfigurationError, match=r"The fsdp plugin .* is not used: strategy "
                                                 r"'single' \(named by ACCEL_STRATEGY"):
        Accelerator(cpu=True)

"""Accelerate's ``accelerate.utils.deepspeed`` path: re-exports from accel-parallel."""

from __future__ import annotations

# Accelerate's name for the scheduler the DeepSpeed engine steps itself (its step is a no-op);
# transformers' Trainer imports it when DeepSpeed is installed
from accel_parallel.deepspeed.compat import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    compile_regions_deepspeed,
    get_active_deepspeed_plugin,
    map_pytorch_optim_to_deepspeed,
)
from accel_parallel.deepspeed.dummies import DummyOptim, DummyScheduler
from accel_parallel.deepspeed.dummies import EngineScheduler as DeepSpeedSchedulerWrapper
from accel_parallel.deepspeed.json import HfDeepSpeedConfig
from accel_parallel.deepspeed.plugin import DeepSpeedPlugin

from accel._module_compat import forward_to

__all__ = ["DeepSpeedEngineWrapper", "DeepSpeedOptimizerWrapper", "DeepSpeedPlugin",
           "DeepSpeedSchedulerWrapper", "DummyOptim", "DummyScheduler", "HfDeepSpeedConfig",
           "compile_regions_deepspeed", "get_active_deepspeed_plugin",
           "map_pytorch_optim_to_deepspeed"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.optimizer", "accel.scheduler")

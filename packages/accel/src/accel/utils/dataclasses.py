"""Accelerate's ``accelerate.utils.dataclasses`` path: enums and kwargs handlers."""

from __future__ import annotations

from accel_parallel import DDPCommunicationHookType, DistributedDataParallelKwargs
from accel_state.enums import (
    BaseEnum,
    ComputeEnvironment,
    DistributedType,
    EnumWithContains,
    SageMakerDistributedType,
)
from accel_state.kwargs import InitProcessGroupKwargs, KwargsHandler
from accel_state.random import RNGType
from accel_state.operations import TensorInformation

# -- accel-precision --
from accel_precision.kwargs import (  # noqa: E402
    AORecipeKwargs,
    AutocastKwargs,
    FP8BackendType,
    FP8RecipeKwargs,
    GradScalerKwargs,
    PrecisionType,
    TERecipeKwargs,
)

__all__ = ["BaseEnum", "ComputeEnvironment", "DDPCommunicationHookType",
           "DistributedDataParallelKwargs", "DistributedType", "EnumWithContains",
           "InitProcessGroupKwargs", "KwargsHandler", "RNGType", "SageMakerDistributedType",
           "TensorInformation", "AORecipeKwargs", "AutocastKwargs", "FP8BackendType",
           "FP8RecipeKwargs", "GradScalerKwargs", "PrecisionType", "TERecipeKwargs"]

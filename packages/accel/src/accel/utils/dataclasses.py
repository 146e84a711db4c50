"""Accelerate's ``accelerate.utils.dataclasses`` path: enums, kwargs handlers, configurations."""

from __future__ import annotations

from accel_checkpoint.project import ProjectConfiguration
from accel_data import DataLoaderConfiguration
from accel_inference.quantize_config import BnbQuantizationConfig
from accel_parallel import (
    DDPCommunicationHookType,
    DeepSpeedPlugin,
    DeepSpeedSequenceParallelConfig,
    DistributedDataParallelKwargs,
    DynamoBackend,
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchDynamoPlugin,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from accel_parallel.fsdp_compat import get_module_class_from_name
from accel_precision.compat import MSAMPRecipeKwargs
from accel_precision.kwargs import (
    AORecipeKwargs,
    AutocastKwargs,
    FP8BackendType,
    FP8RecipeKwargs,
    GradScalerKwargs,
    PrecisionType,
    TERecipeKwargs,
)
from accel_state.enums import (
    BaseEnum,
    ComputeEnvironment,
    CustomDtype,
    DistributedType,
    EnumWithContains,
    SageMakerDistributedType,
)
from accel_state.kwargs import GradientAccumulationPlugin, InitProcessGroupKwargs, KwargsHandler
from accel_state.operations import TensorInformation
from accel_state.random import RNGType
from accel_tracking import LoggerType

from accel._profiling import ProfileKwargs

__all__ = ["get_module_class_from_name", "AORecipeKwargs", "AutocastKwargs", "BaseEnum", "BnbQuantizationConfig",
           "ComputeEnvironment",
           "DDPCommunicationHookType", "DataLoaderConfiguration", "DistributedDataParallelKwargs",
           "DistributedType", "DynamoBackend", "EnumWithContains", "FP8BackendType", "FP8RecipeKwargs",
           "DeepSpeedPlugin", "DeepSpeedSequenceParallelConfig", "CustomDtype", "MSAMPRecipeKwargs",
           "FullyShardedDataParallelPlugin", "ParallelismConfig", "TorchContextParallelConfig",
           "TorchTensorParallelConfig", "TorchTensorParallelPlugin",
           "GradScalerKwargs", "GradientAccumulationPlugin", "InitProcessGroupKwargs",
           "KwargsHandler", "LoggerType", "PrecisionType", "ProfileKwargs",
           "ProjectConfiguration", "RNGType",
           "SageMakerDistributedType", "TERecipeKwargs", "TensorInformation",
           "TorchDynamoPlugin"]

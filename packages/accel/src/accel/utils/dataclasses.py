"""Accelerate's ``accelerate.utils.dataclasses`` path: enums, kwargs handlers, configurations."""

from __future__ import annotations

from typing import Literal

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
from accel_parallel.fsdp.compat import get_module_class_from_name
from accel_parallel.pipeline import PipelineParallelConfig
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

from accel._module_compat import forward_to
from accel._profiling import ProfileKwargs
from accel.utils.megatron_lm import (
    MODEL_CONFIGS_TO_MEGATRON_PARSERS,
    MegatronLMPlugin,
    add_model_config_to_megatron_parser,
    parse_bert_config,
    parse_glm4_moe_config,
    parse_gpt2_config,
    parse_llama_config,
    parse_t5_config,
)

#: Accelerate's Literal aliases of fp8 and profiler option values (type hints only)
Backend = Literal["MSAMP", "TE"]
OptLevel = Literal["O1", "O2"]
FP8Format = Literal["HYBRID", "E4M3", "E5M2"]
AmaxComputeAlgorithm = Literal["max", "most_recent"]
ProfilerActivity = Literal["cpu", "xpu", "mtia", "cuda", "hpu"]

__all__ = ["get_module_class_from_name", "AORecipeKwargs", "AutocastKwargs", "BaseEnum",
           "BnbQuantizationConfig", "ComputeEnvironment", "DDPCommunicationHookType",
           "DataLoaderConfiguration", "DistributedDataParallelKwargs", "DistributedType",
           "DynamoBackend", "EnumWithContains", "FP8BackendType", "FP8RecipeKwargs",
           "DeepSpeedPlugin", "DeepSpeedSequenceParallelConfig", "CustomDtype",
           "MSAMPRecipeKwargs", "FullyShardedDataParallelPlugin", "ParallelismConfig",
           "PipelineParallelConfig",
           "TorchContextParallelConfig", "TorchTensorParallelConfig", "TorchTensorParallelPlugin",
           "GradScalerKwargs", "GradientAccumulationPlugin", "InitProcessGroupKwargs",
           "KwargsHandler", "LoggerType", "PrecisionType", "ProfileKwargs",
           "ProjectConfiguration", "RNGType", "SageMakerDistributedType", "TERecipeKwargs",
           "TensorInformation", "TorchDynamoPlugin", "MegatronLMPlugin",
           "MODEL_CONFIGS_TO_MEGATRON_PARSERS", "add_model_config_to_megatron_parser",
           "parse_bert_config", "parse_gpt2_config", "parse_t5_config", "parse_llama_config",
           "parse_glm4_moe_config", "Backend", "OptLevel", "FP8Format", "AmaxComputeAlgorithm",
           "ProfilerActivity"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")

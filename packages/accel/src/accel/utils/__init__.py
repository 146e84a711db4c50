"""Accelerate's ``accelerate.utils`` namespace: re-exports of the micro-packages' helpers.

Every name here is the very object defined in an ``accel_*`` package, so
``accel.utils.gather is accel_state.gather``.
"""

from __future__ import annotations

from accel_parallel import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    extract_model_from_parallel,
)
from accel_state import *  # noqa: F403
from accel_state import __all__ as _state_all
from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as _imports_all

from accel.utils.environment import *  # noqa: F403
from accel.utils.environment import __all__ as _environment_all

# -- accel-tracking: progress bars, tracker names and probes (accel.utils.tqdm, LoggerType) --
from accel_tracking import LoggerType as LoggerType  # noqa: E402
from accel_tracking import tqdm as tqdm  # noqa: E402
from accel_tracking.probes import *  # noqa: E402,F403
from accel_tracking.probes import __all__ as _tracking_probes_all  # noqa: E402

_tracking_all = ["tqdm", "LoggerType", *_tracking_probes_all]

# -- accel-precision: precision enums, kwargs handlers, fp8 helpers --
from accel_precision import (  # noqa: E402
    AORecipeKwargs as AORecipeKwargs,
    AutocastKwargs as AutocastKwargs,
    FP8BackendType as FP8BackendType,
    FP8RecipeKwargs as FP8RecipeKwargs,
    GradScalerKwargs as GradScalerKwargs,
    PrecisionType as PrecisionType,
    TERecipeKwargs as TERecipeKwargs,
    contextual_fp8_autocast as contextual_fp8_autocast,
    convert_model as convert_model,
    convert_model_to_fp8_ao as convert_model_to_fp8_ao,
    has_ao_layers as has_ao_layers,
    has_transformer_engine_layers as has_transformer_engine_layers,
)

_precision_all = ["AORecipeKwargs", "AutocastKwargs", "FP8BackendType", "FP8RecipeKwargs",
                  "GradScalerKwargs", "PrecisionType", "TERecipeKwargs", "contextual_fp8_autocast",
                  "convert_model", "convert_model_to_fp8_ao", "has_ao_layers",
                  "has_transformer_engine_layers"]

# -- accel-data: the Accelerator's data options --
from accel_data import DataLoaderConfiguration  # noqa: E402

# -- accel-checkpoint: project configuration, weights helpers, on-disk names --
from accel_checkpoint.constants import (  # noqa: E402
    FSDP_MODEL_NAME, MODEL_NAME, OPTIMIZER_NAME, PROFILE_PATTERN_NAME, RNG_STATE_NAME,
    SAFE_MODEL_NAME, SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_PATTERN_NAME,
    SAMPLER_NAME, SCALER_NAME, SCHEDULER_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME,
    WEIGHTS_PATTERN_NAME,
)
from accel_checkpoint.project import ProjectConfiguration  # noqa: E402
from accel_checkpoint.weights import (  # noqa: E402
    clean_state_dict_for_safetensors, convert_bytes, convert_file_size_to_int, dtype_byte_size,
    id_tensor_storage, load, load_checkpoint_in_model, save,
)

_checkpoint_all = [
    "FSDP_MODEL_NAME", "MODEL_NAME", "OPTIMIZER_NAME", "PROFILE_PATTERN_NAME", "RNG_STATE_NAME",
    "SAFE_MODEL_NAME", "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME", "SAFE_WEIGHTS_PATTERN_NAME",
    "SAMPLER_NAME", "SCALER_NAME", "SCHEDULER_NAME", "WEIGHTS_INDEX_NAME", "WEIGHTS_NAME",
    "WEIGHTS_PATTERN_NAME", "ProjectConfiguration", "clean_state_dict_for_safetensors",
    "convert_bytes", "convert_file_size_to_int", "dtype_byte_size", "id_tensor_storage", "load",
    "load_checkpoint_in_model", "save",
]

__all__ = [
    "DataLoaderConfiguration",
    *_state_all, *_imports_all, *_environment_all, "DDPCommunicationHookType",
    "DistributedDataParallelKwargs", "extract_model_from_parallel", *_tracking_all,
    *_precision_all, *_checkpoint_all,
]

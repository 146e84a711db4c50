"""Accelerate's ``accelerate.utils`` namespace: re-exports of the micro-packages' helpers.

Every name here is the very object defined in an ``accel_*`` package, so
``accel.utils.gather is accel_state.gather``. The submodules (``accel.utils.operations``,
``.random``, ``.environment``, ``.imports``, ``.dataclasses``, ``.other``, ...) give Accelerate's
finer paths; everything they export is also here.
"""

from __future__ import annotations

from accel_checkpoint.merge import merge_fsdp_weights
from accel_checkpoint.weights import (
    clean_state_dict_for_safetensors,
    convert_bytes,
    convert_file_size_to_int,
    dtype_byte_size,
    id_tensor_storage,
    load,
    save,
)
from accel_inference.layerwise import attach_layerwise_casting_hooks
from accel_inference.offload import *  # noqa: F403
from accel_inference.offload import __all__ as _offload_all
from accel_inference.quantize import has_4bit_bnb_layers, load_and_quantize_model
from accel_parallel import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    FullyShardedDataParallelPlugin,
    extract_model_from_parallel,
)
from accel_parallel.dtensor_utils import model_has_dtensor
from accel_precision import (
    contextual_fp8_autocast,
    convert_model,
    convert_model_to_fp8_ao,
    has_ao_layers,
    has_transformer_engine_layers,
)
from accel_precision.compat import apply_fp8_autowrap, filter_first_and_last_linear_layers
from accel_state import *  # noqa: F403
from accel_state import __all__ as _state_all
from accel_state.imports import *  # noqa: F403
from accel_state.imports import __all__ as _imports_all
from accel_state.operations import *  # noqa: F403
from accel_state.operations import __all__ as _operations_all
from accel_tracking.probes import *  # noqa: F403
from accel_tracking.probes import __all__ as _tracking_probes_all

from accel._accelerate_helpers import install_xla
from accel._amp_context import get_mixed_precision_context_manager
from accel.utils.constants import *  # noqa: F403
from accel.utils.constants import __all__ as _constants_all
from accel.utils.dataclasses import *  # noqa: F403
from accel.utils.modeling import *  # noqa: F403
from accel.utils.modeling import __all__ as _modeling_all
from accel.utils.deepspeed import *  # noqa: F403
from accel.utils.deepspeed import __all__ as _deepspeed_all
from accel.utils.dataclasses import __all__ as _dataclasses_all
from accel.utils.environment import *  # noqa: F403
from accel.utils.environment import __all__ as _environment_all
from accel.utils.memory import *  # noqa: F403
from accel.utils.memory import __all__ as _memory_all
from accel.utils.other import *  # noqa: F403
from accel.utils.other import __all__ as _other_all
from accel.utils.launch import *  # noqa: F403
from accel.utils.launch import __all__ as _launch_all
from accel.utils.fsdp_utils import *  # noqa: F403
from accel.utils.fsdp_utils import __all__ as _fsdp_utils_all
from accel.utils.imports import deepspeed_required
from accel.utils.megatron_lm import (
    AbstractTrainStep,
    BertTrainStep,
    GPTTrainStep,
    MegatronEngine,
    MegatronLMDummyDataLoader,
    MegatronLMDummyScheduler,
    MegatronLMOptimizerWrapper,
    MegatronLMSchedulerWrapper,
    T5TrainStep,
    avg_losses_across_data_parallel_group,
    gather_across_data_parallel_groups,
)
from accel.utils.megatron_lm import initialize as megatron_lm_initialize
from accel.utils.megatron_lm import prepare_data_loader as megatron_lm_prepare_data_loader
from accel.utils.megatron_lm import (
    prepare_model_optimizer_scheduler as megatron_lm_prepare_model_optimizer_scheduler,
)
from accel.utils.megatron_lm import prepare_optimizer as megatron_lm_prepare_optimizer
from accel.utils.megatron_lm import prepare_scheduler as megatron_lm_prepare_scheduler
# imports the submodule first, then binds the name to the function (as Accelerate does)
from accel.utils.tqdm import tqdm

# Accelerate's submodules are attributes of accelerate.utils once it is imported (its
# __init__ imports from each); these are the ones nothing above imported yet
from accel.utils import (  # noqa: E402,F401
    ao,
    bnb,
    offload,
    operations,
    random,
    torch_xla,
    transformer_engine,
    versions,
)

_checkpoint_all = [
    "clean_state_dict_for_safetensors", "convert_bytes",
    "convert_file_size_to_int", "dtype_byte_size", "id_tensor_storage", "load",
    "save", "merge_fsdp_weights",
]
_precision_all = ["contextual_fp8_autocast", "convert_model", "convert_model_to_fp8_ao",
                  "has_ao_layers", "has_transformer_engine_layers", "apply_fp8_autowrap",
                  "filter_first_and_last_linear_layers", "attach_layerwise_casting_hooks",
                  "model_has_dtensor", "get_mixed_precision_context_manager",
                  "load_and_quantize_model", "has_4bit_bnb_layers"]

_megatron_all = [  # importable, refused on use (accel.utils.megatron_lm)
    "AbstractTrainStep", "BertTrainStep", "GPTTrainStep", "MegatronEngine",
    "MegatronLMDummyDataLoader", "MegatronLMDummyScheduler", "MegatronLMOptimizerWrapper",
    "MegatronLMSchedulerWrapper", "T5TrainStep", "avg_losses_across_data_parallel_group",
    "gather_across_data_parallel_groups", "megatron_lm_initialize",
    "megatron_lm_prepare_data_loader", "megatron_lm_prepare_model_optimizer_scheduler",
    "megatron_lm_prepare_optimizer", "megatron_lm_prepare_scheduler",
]

__all__ = sorted({
    *_offload_all, *_modeling_all,
    *_deepspeed_all,
    *_state_all, *_imports_all, *_operations_all, *_environment_all, *_dataclasses_all,
    *_tracking_probes_all, *_checkpoint_all, *_precision_all, *_other_all, *_memory_all,
    *_launch_all, "tqdm", *_fsdp_utils_all, *_constants_all, "deepspeed_required",
    "extract_model_from_parallel", *_megatron_all, "install_xla",
})

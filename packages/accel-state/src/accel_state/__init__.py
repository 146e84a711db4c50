"""accel-state: process and device state, collectives, RNG, the environment contract, errors.

Layer 0 of accel: depends on torch only. Every other accel package builds on it, and a
plain PyTorch script can use it alone (``PartialState()``, ``gather``, ``set_seed``).
"""

from __future__ import annotations

from accel_state.detect import CPUInformation, get_cpu_distributed_information
from accel_state.enums import (
    BaseEnum,
    ComputeEnvironment,
    DistributedType,
    EnumWithContains,
    SageMakerDistributedType,
)
from accel_state.errors import (
    AccelError,
    ConfigurationError,
    DistributedError,
    DistributedOperationException,
    LaunchError,
    MissingDependencyError,
)
from accel_state.kwargs import GradientAccumulationPlugin, InitProcessGroupKwargs, KwargsHandler
from accel_state.operations import (
    CannotPadNestedTensorWarning,
    GatheredParameters,
    TensorInformation,
    broadcast,
    broadcast_object_list,
    chained_operation,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    copy_tensor_to_devices,
    find_batch_size,
    find_device,
    gather,
    gather_object,
    get_data_structure,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_tensor_information,
    is_torch_tensor,
    listify,
    pad_across_processes,
    pad_input_tensors,
    recursively_apply,
    reduce,
    send_to_device,
    slice_tensors,
    verify_operation,
)
from accel_state.random import (
    RNGType,
    capture_rng_state,
    restore_rng_state,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
)
from accel_state.gradient_state import MicroStep
from accel_state.protocols import Stateful
from accel_state.registry import Registry
from accel_state.state import (
    GradientState,
    PartialState,
    SharedDict,
    ThreadLocalSharedDict,
    is_initialized,
)

__version__ = "0.1.11"


def wait_for_everyone() -> None:
    """Barrier across all processes (Accelerate's ``accelerate.utils.wait_for_everyone``)."""
    PartialState().wait_for_everyone()


__all__ = [
    "AccelError", "BaseEnum", "CPUInformation", "CannotPadNestedTensorWarning",
    "ComputeEnvironment", "ConfigurationError", "DistributedError",
    "DistributedOperationException", "DistributedType", "EnumWithContains", "GatheredParameters",
    "GradientAccumulationPlugin", "GradientState", "InitProcessGroupKwargs", "KwargsHandler", "LaunchError",
    "MicroStep", "MissingDependencyError", "PartialState", "RNGType", "Registry", "SageMakerDistributedType",
    "SharedDict", "Stateful", "TensorInformation", "ThreadLocalSharedDict", "broadcast",
    "broadcast_object_list", "capture_rng_state", "chained_operation", "concatenate",
    "convert_outputs_to_fp32", "convert_to_fp32", "copy_tensor_to_devices", "find_batch_size",
    "find_device", "gather", "gather_object", "get_cpu_distributed_information",
    "get_data_structure", "honor_type", "ignorant_find_batch_size", "initialize_tensors",
    "is_initialized", "is_namedtuple", "is_tensor_information", "is_torch_tensor", "listify",
    "pad_across_processes", "pad_input_tensors", "recursively_apply", "reduce",
    "restore_rng_state", "send_to_device", "set_seed", "slice_tensors", "synchronize_rng_state",
    "synchronize_rng_states", "verify_operation", "wait_for_everyone",
]

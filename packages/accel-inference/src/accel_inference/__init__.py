"""accel-inference: run models larger than one device.

Empty (meta) initialisation, device maps ("auto" placement over GPUs, CPU and disk),
checkpoint loading straight to each tensor's device, CPU/disk offload with background
prefetch of the next block, Accelerate-compatible forward hooks (``module._hf_hook``),
pipeline-parallel inference on ``torch.distributed.pipelining`` and a memory estimator
(``accel estimate-memory``). Names load lazily (PEP 562): importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.6"

_MODULES = {
    "accel_inference.empty_init": ("init_empty_weights", "init_on_device"),
    "accel_inference.sizing": (
        "compute_module_sizes", "compute_module_total_buffer_size", "calculate_maximum_sizes",
        "get_max_layer_size", "get_max_memory", "get_balanced_memory", "convert_dtype"),
    "accel_inference.device_map": ("infer_auto_device_map", "check_device_map",
                                   "clean_device_map"),
    "accel_inference.tied": ("find_tied_parameters", "retie_parameters",
                             "check_tied_parameters_on_same_device",
                             "check_tied_parameters_in_config", "get_module_size_with_ties"),
    "accel_inference.tensors": ("set_module_tensor_to_device", "named_module_tensors",
                                "get_non_persistent_buffers", "align_module_device",
                                "has_offloaded_params", "clear_device_cache"),
    "accel_inference.loading": ("load_state_dict", "load_checkpoint_in_model"),
    "accel_inference.offload": ("offload_weight", "load_offloaded_weight", "save_offload_index",
                                "offload_state_dict", "OffloadedWeightsLoader",
                                "PrefixedDataset", "extract_submodules_state_dict",
                                "load_offloaded_weights", "get_state_dict_from_offload",
                                "get_state_dict_offloaded_model"),
    "accel_inference.hooks": (
        "ModelHook", "SequentialHook", "add_hook_to_module", "remove_hook_from_module",
        "AlignDevicesHook", "CpuOffload", "UserCpuOffloadHook", "LayerwiseCastingHook"),
    "accel_inference.attach": (
        "attach_execution_device_hook", "attach_align_device_hook",
        "attach_align_device_hook_on_blocks", "remove_hook_from_submodules"),
    "accel_inference.layerwise": ("attach_layerwise_casting_hooks",),
    "accel_inference.prefetch": ("Prefetcher",),
    "accel_inference.big_modeling": ("cpu_offload", "cpu_offload_with_hook", "disk_offload",
                                     "dispatch_model", "load_checkpoint_and_dispatch"),
    "accel_inference.pipeline": ("prepare_pippy", "generate_device_map", "build_pipeline",
                                 "pippy_forward", "find_pippy_batch_size"),
    "accel_inference.quantize_config": ("BnbQuantizationConfig",),
    "accel_inference.quantize": ("load_and_quantize_model", "has_4bit_bnb_layers"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AlignDevicesHook", "BnbQuantizationConfig", "CpuOffload", "LayerwiseCastingHook",
    "ModelHook", "OffloadedWeightsLoader", "Prefetcher", "PrefixedDataset", "SequentialHook",
    "UserCpuOffloadHook", "add_hook_to_module", "align_module_device",
    "attach_align_device_hook", "attach_align_device_hook_on_blocks",
    "attach_execution_device_hook", "attach_layerwise_casting_hooks", "build_pipeline",
    "calculate_maximum_sizes",
    "check_device_map", "check_tied_parameters_in_config",
    "check_tied_parameters_on_same_device", "clean_device_map", "clear_device_cache",
    "compute_module_sizes", "compute_module_total_buffer_size", "convert_dtype", "cpu_offload",
    "cpu_offload_with_hook", "disk_offload", "dispatch_model", "extract_submodules_state_dict",
    "find_pippy_batch_size", "find_tied_parameters", "generate_device_map",
    "get_balanced_memory", "get_max_layer_size", "get_max_memory", "get_module_size_with_ties",
    "get_non_persistent_buffers", "get_state_dict_from_offload",
    "get_state_dict_offloaded_model", "has_4bit_bnb_layers",
    "has_offloaded_params", "infer_auto_device_map",
    "init_empty_weights", "init_on_device", "load_checkpoint_and_dispatch",
    "load_and_quantize_model", "load_checkpoint_in_model", "load_offloaded_weight",
    "load_offloaded_weights",
    "load_state_dict", "named_module_tensors", "offload_state_dict", "offload_weight",
    "pippy_forward", "prepare_pippy", "remove_hook_from_module", "remove_hook_from_submodules",
    "retie_parameters", "save_offload_index", "set_module_tensor_to_device", "__version__",
]

if TYPE_CHECKING:
    from accel_inference.attach import (
        attach_align_device_hook,
        attach_align_device_hook_on_blocks,
        attach_execution_device_hook,
        remove_hook_from_submodules,
    )
    from accel_inference.big_modeling import (
        cpu_offload,
        cpu_offload_with_hook,
        disk_offload,
        dispatch_model,
        load_checkpoint_and_dispatch,
    )
    from accel_inference.device_map import (
        check_device_map,
        clean_device_map,
        infer_auto_device_map,
    )
    from accel_inference.empty_init import init_empty_weights, init_on_device
    from accel_inference.hooks import (
        AlignDevicesHook,
        CpuOffload,
        LayerwiseCastingHook,
        ModelHook,
        SequentialHook,
        UserCpuOffloadHook,
        add_hook_to_module,
        remove_hook_from_module,
    )
    from accel_inference.layerwise import attach_layerwise_casting_hooks
    from accel_inference.loading import load_checkpoint_in_model, load_state_dict
    from accel_inference.offload import (
        OffloadedWeightsLoader,
        PrefixedDataset,
        extract_submodules_state_dict,
        get_state_dict_from_offload,
        get_state_dict_offloaded_model,
        load_offloaded_weight,
        load_offloaded_weights,
        offload_state_dict,
        offload_weight,
        save_offload_index,
    )
    from accel_inference.pipeline import (
        build_pipeline,
        find_pippy_batch_size,
        generate_device_map,
        pippy_forward,
        prepare_pippy,
    )
    from accel_inference.prefetch import Prefetcher
    from accel_inference.quantize import has_4bit_bnb_layers, load_and_quantize_model
    from accel_inference.quantize_config import BnbQuantizationConfig
    from accel_inference.sizing import (
        calculate_maximum_sizes,
        compute_module_sizes,
        compute_module_total_buffer_size,
        convert_dtype,
        get_balanced_memory,
        get_max_layer_size,
        get_max_memory,
    )
    from accel_inference.tensors import (
        align_module_device,
        clear_device_cache,
        get_non_persistent_buffers,
        has_offloaded_params,
        named_module_tensors,
        set_module_tensor_to_device,
    )
    from accel_inference.tied import (
        check_tied_parameters_in_config,
        check_tied_parameters_on_same_device,
        find_tied_parameters,
        get_module_size_with_ties,
        retie_parameters,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_inference' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

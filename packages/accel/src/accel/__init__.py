"""accel: one PyTorch training script on CPU, one GPU, many GPUs and many machines.

The public names are loaded lazily (PEP 562) so ``import accel`` costs nothing until
a name is used; type checkers see the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.4.6"

# public name -> module that defines it
_EXPORTS = {
    "Accelerator": "accel.accelerator",
    "PartialState": "accel_state",
    "DistributedType": "accel_state",
    "InitProcessGroupKwargs": "accel_state",
    "synchronize_rng_states": "accel_state",
    "is_rich_available": "accel_state.imports",
    "find_executable_batch_size": "accel_state.memory",
    "DistributedDataParallelKwargs": "accel_parallel",
    "DDPCommunicationHookType": "accel_parallel",
    "FullyShardedDataParallelPlugin": "accel_parallel",
    "DeepSpeedPlugin": "accel_parallel",
    "ParallelismConfig": "accel_parallel",
    "PipelineParallelConfig": "accel_parallel.pipeline",
    "AutocastKwargs": "accel_precision",
    "GradScalerKwargs": "accel_precision",
    "ProfileKwargs": "accel._profiling",
    # accel-data
    "DataLoaderConfiguration": "accel_data",
    "skip_first_batches": "accel_data",
    # accel-checkpoint
    "ProjectConfiguration": "accel_checkpoint.project",
    # accel-inference
    "load_checkpoint_in_model": "accel_inference.loading",
    "init_empty_weights": "accel_inference.empty_init",
    "init_on_device": "accel_inference.empty_init",
    "cpu_offload": "accel_inference.big_modeling",
    "cpu_offload_with_hook": "accel_inference.big_modeling",
    "disk_offload": "accel_inference.big_modeling",
    "dispatch_model": "accel_inference.big_modeling",
    "load_checkpoint_and_dispatch": "accel_inference.big_modeling",
    "infer_auto_device_map": "accel_inference.device_map",
    "prepare_pippy": "accel_inference.pipeline",
    # accel-launch
    "notebook_launcher": "accel_launch.launchers",
    "debug_launcher": "accel_launch.launchers",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from accel_parallel import (
        DDPCommunicationHookType,
        DeepSpeedPlugin,
        DistributedDataParallelKwargs,
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
    )
    from accel_parallel.pipeline import PipelineParallelConfig
    from accel_checkpoint.project import ProjectConfiguration
    from accel_inference.big_modeling import (
        cpu_offload,
        cpu_offload_with_hook,
        disk_offload,
        dispatch_model,
        load_checkpoint_and_dispatch,
    )
    from accel_inference.device_map import infer_auto_device_map
    from accel_inference.empty_init import init_empty_weights, init_on_device
    from accel_inference.loading import load_checkpoint_in_model
    from accel_inference.pipeline import prepare_pippy
    from accel_launch.launchers import debug_launcher, notebook_launcher
    from accel_data import DataLoaderConfiguration, skip_first_batches
    from accel_precision import AutocastKwargs, GradScalerKwargs
    from accel_state.memory import find_executable_batch_size
    from accel_state.imports import is_rich_available
    from accel_state import (
        DistributedType,
        InitProcessGroupKwargs,
        PartialState,
        synchronize_rng_states,
    )

    from accel._profiling import ProfileKwargs
    from accel.accelerator import Accelerator


# Accelerate's module paths: after a bare ``import accel``, ``accel.utils.gather`` and
# ``accel.state.AcceleratorState`` resolve as after ``import accelerate``, but each submodule
# is imported only when first touched.
_SUBMODULES = frozenset({
    "accelerator", "big_modeling", "checkpointing", "commands", "data_loader", "hooks",
    "inference", "launchers", "local_sgd", "logging", "memory_utils", "optimizer",
    "parallelism_config", "scheduler", "state", "test_utils", "tracking", "utils",
})


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        if name in _SUBMODULES:  # the import binds accel.<name>; nothing to cache here
            return importlib.import_module(f"accel.{name}")
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})

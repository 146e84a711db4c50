"""accel: one PyTorch training script on CPU, one GPU, many GPUs and many machines.

The public names are loaded lazily (PEP 562) so ``import accel`` costs nothing until
a name is used; type checkers see the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "Accelerator": "accel.accelerator",
    "PartialState": "accel_state",
    "DistributedType": "accel_state",
    "InitProcessGroupKwargs": "accel_state",
    "synchronize_rng_states": "accel_state",
    "DistributedDataParallelKwargs": "accel_parallel",
    "DDPCommunicationHookType": "accel_parallel",
    "FullyShardedDataParallelPlugin": "accel_parallel",
    "AutocastKwargs": "accel_precision",
    "GradScalerKwargs": "accel_precision",
    # accel-data
    "DataLoaderConfiguration": "accel_data",
    "skip_first_batches": "accel_data",
    # accel-checkpoint
    "ProjectConfiguration": "accel_checkpoint.project",
    "load_checkpoint_in_model": "accel_checkpoint.weights",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from accel_parallel import (
        DDPCommunicationHookType,
        DistributedDataParallelKwargs,
        FullyShardedDataParallelPlugin,
    )
    from accel_checkpoint.project import ProjectConfiguration
    from accel_checkpoint.weights import load_checkpoint_in_model
    from accel_data import DataLoaderConfiguration, skip_first_batches
    from accel_precision import AutocastKwargs, GradScalerKwargs
    from accel_state import (
        DistributedType,
        InitProcessGroupKwargs,
        PartialState,
        synchronize_rng_states,
    )

    from accel.accelerator import Accelerator


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

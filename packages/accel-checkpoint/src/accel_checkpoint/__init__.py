"""accel-checkpoint: crash-safe, verified checkpoints of anything with ``state_dict()``.

Tensors go to safetensors, everything else to JSON, and ``manifest.json`` (sizes and
xxh3-128 chunk digests of every file; sha256 on request) is written last, just before an atomic rename: a checkpoint either
loads exactly or is refused with the name of the bad file. Layouts where every rank writes
its own files (DCP shards, an engine's checkpoint) plug in as a ``RankCheckpointWriter``
(``accel_checkpoint.layouts``); arbitrary objects are never unpickled without an opt-in.
Usable alone from a plain PyTorch loop (``CheckpointManager``) or through
``accel.Accelerator.save_state``.

Names are loaded lazily (PEP 562) so ``accel checkpoint --help`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.4.4"

_EXPORTS = {
    "CheckpointManager": "accel_checkpoint.manager",
    "LoadedCheckpoint": "accel_checkpoint.manager",
    "PendingSave": "accel_checkpoint.manager",
    "save_checkpoint": "accel_checkpoint.manager",
    "load_checkpoint": "accel_checkpoint.manager",
    "read_object": "accel_checkpoint.manager",
    "rotate_checkpoints": "accel_checkpoint.manager",
    "wait_for_pending_saves": "accel_checkpoint.manager",
    "wait_for_staging": "accel_checkpoint.manager",
    "CheckpointError": "accel_checkpoint.errors",
    "CorruptCheckpointError": "accel_checkpoint.errors",
    "CheckpointNotFoundError": "accel_checkpoint.errors",
    "CheckpointExistsError": "accel_checkpoint.errors",
    "CheckpointWriteError": "accel_checkpoint.errors",
    "Manifest": "accel_checkpoint.manifest",
    "CheckpointInfo": "accel_checkpoint.manifest",
    "Verification": "accel_checkpoint.hashing",
    "digest_algorithm": "accel_checkpoint.hashing",
    "DIGESTS": "accel_checkpoint.hashing",
    "verify_checkpoint": "accel_checkpoint.manifest",
    "list_checkpoints": "accel_checkpoint.manifest",
    "latest_checkpoint": "accel_checkpoint.manifest",
    "ProjectConfiguration": "accel_checkpoint.project",
    "save_model_weights": "accel_checkpoint.weights",
    "load_model_weights": "accel_checkpoint.weights",
    "checkpoint_files": "accel_checkpoint.weights",
    "clean_state_dict_for_safetensors": "accel_checkpoint.weights",
    "id_tensor_storage": "accel_checkpoint.weights",
    "convert_file_size_to_int": "accel_checkpoint.weights",
    "dtype_byte_size": "accel_checkpoint.weights",
    "convert_bytes": "accel_checkpoint.weights",
    "save": "accel_checkpoint.weights",
    "load": "accel_checkpoint.weights",
    "save_sharded_state": "accel_checkpoint.sharded",
    "load_sharded_state": "accel_checkpoint.sharded",
    "LoadedShardedState": "accel_checkpoint.sharded",
    "save_rank_state": "accel_checkpoint.per_rank",
    "load_rank_state": "accel_checkpoint.per_rank",
    "LoadedRankState": "accel_checkpoint.per_rank",
    "DCPWriter": "accel_checkpoint.dcp_writer",
    "CHECKPOINT_LAYOUTS": "accel_checkpoint.layouts",
    "CheckpointLayout": "accel_checkpoint.layouts",
    "ReplicatedLayout": "accel_checkpoint.layouts",
    "PerRankLayout": "accel_checkpoint.layouts",
    "resolve_layout": "accel_checkpoint.layouts",
    "merge_fsdp_weights": "accel_checkpoint.merge",
    "load_full_state_dict": "accel_checkpoint.merge",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from accel_checkpoint.errors import (
        CheckpointError,
        CheckpointExistsError,
        CheckpointNotFoundError,
        CheckpointWriteError,
        CorruptCheckpointError,
    )
    from accel_checkpoint.manager import (
        CheckpointManager,
        LoadedCheckpoint,
        PendingSave,
        load_checkpoint,
        read_object,
        rotate_checkpoints,
        save_checkpoint,
        wait_for_pending_saves,
        wait_for_staging,
    )
    from accel_checkpoint.dcp_writer import DCPWriter
    from accel_checkpoint.hashing import DIGESTS, Verification, digest_algorithm
    from accel_checkpoint.layouts import (
        CHECKPOINT_LAYOUTS,
        CheckpointLayout,
        PerRankLayout,
        ReplicatedLayout,
        resolve_layout,
    )
    from accel_checkpoint.manifest import (
        CheckpointInfo,
        Manifest,
        latest_checkpoint,
        list_checkpoints,
        verify_checkpoint,
    )
    from accel_checkpoint.merge import load_full_state_dict, merge_fsdp_weights
    from accel_checkpoint.per_rank import LoadedRankState, load_rank_state, save_rank_state
    from accel_checkpoint.project import ProjectConfiguration
    from accel_checkpoint.sharded import LoadedShardedState, load_sharded_state, save_sharded_state
    from accel_checkpoint.weights import (
        clean_state_dict_for_safetensors,
        convert_bytes,
        convert_file_size_to_int,
        dtype_byte_size,
        id_tensor_storage,
        load,
        checkpoint_files,
        load_model_weights,
        save,
        save_model_weights,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_checkpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""``Accelerator.save_state`` / ``load_state`` for sharded models (FSDP2, DTensor parameters).

A model whose parameters are DTensors cannot be saved the replicated way (rank 0 writing
full state dicts): each rank holds only its shards. Here every rank writes its own shards
of the models and optimizers through :mod:`accel_checkpoint.sharded` (DCP inside the same
crash-safe commit); schedulers, dataloader positions, the grad scaler and
``register_for_checkpointing`` objects, whose state is the same on every rank, are written
whole by rank 0 as safetensors + JSON, and each rank writes its own RNG states. Object
names are those of the replicated format (``model``, ``optimizer_1``, ``dataloader``, ...).
``checkpointing.py`` dispatches here when a prepared model is sharded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.sharded import SHARDED_LAYOUT, load_sharded_state, save_sharded_state
from accel_parallel import is_sharded_model

from accel._checkpoint_objects import saved_dataloaders, scaler_of, shared_objects

__all__ = ["is_sharded_model", "check_layout", "save_sharded_accelerator_state",
           "load_sharded_accelerator_state"]

_REPLICATED_LAYOUT = "replicated"


def check_layout(manifest_layout: str, world_size: int, sharded: bool,
                 path: str | os.PathLike[str]) -> None:
    """Refuse a checkpoint whose layout does not fit the prepared models, saying the fix.

    ``manifest_layout`` and ``world_size`` come from the checkpoint's manifest;
    ``sharded``: whether any prepared model has DTensor parameters.
    """
    if manifest_layout == SHARDED_LAYOUT and not sharded:
        raise CheckpointError(
            f"{path} is a sharded checkpoint (saved by {world_size} process(es) from models "
            "with DTensor parameters, e.g. FSDP2), but no prepared model is sharded. Shard "
            "the model the same way (fully_shard) before accelerator.prepare and load_state, "
            f"or merge the shards into full weights with `accel merge-weights {path} OUT` and "
            "load those with load_checkpoint_in_model(model, OUT).")
    if manifest_layout == _REPLICATED_LAYOUT and sharded:
        raise CheckpointError(
            f"{path} is a replicated checkpoint (full state dicts, saved by {world_size} "
            "process(es) from unsharded models), but a prepared model is sharded (DTensor "
            "parameters, e.g. FSDP2). Load it into models prepared without fully_shard, or "
            f"load its weights before sharding: load_checkpoint_in_model(model, '{path}'), "
            "then fully_shard(model) (the optimizer state then starts afresh).")
    if manifest_layout not in (SHARDED_LAYOUT, _REPLICATED_LAYOUT):
        raise CheckpointError(
            f"{path} has layout {manifest_layout!r}, which this accel does not know (it knows "
            f"{_REPLICATED_LAYOUT!r} and {SHARDED_LAYOUT!r}): upgrade accel to load it.")


def _split(objects: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Models and optimizers (saved shard by shard) apart from the rest (saved whole)."""
    by_shard = {n: o for n, o in objects.items()
                if isinstance(o, (torch.nn.Module, torch.optim.Optimizer))}
    return by_shard, {n: o for n, o in objects.items() if n not in by_shard}


def save_sharded_accelerator_state(accelerator: Any, target: Path,
                                   prepare_dir: Callable[[Path], Any] | None = None,
                                   on_commit: Callable[[Path], Any] | None = None) -> Path:
    """Save everything ``save_state`` saves, models and optimizers shard by shard.

    A collective (every rank). Save pre-hooks run on every rank as
    ``hook(models, [], staging_dir)``: the weights list is empty, as Accelerate passes it
    for FSDP, and what the hooks write into the staging directory is committed and listed
    in the manifest. Then ``prepare_dir(staging)`` if given; ``on_commit(path)`` runs on
    rank 0 after the commit (rotation).
    """
    models = accelerator._models

    def prepare(staging: Path) -> None:
        for hook in accelerator._save_model_state_pre_hook.values():
            hook(models, [], str(staging))
        if prepare_dir is not None:
            prepare_dir(staging)

    objects = shared_objects([accelerator.unwrap_model(m) for m in models],
                             accelerator._optimizers, accelerator._schedulers,
                             accelerator._dataloaders, scaler_of(accelerator),
                             accelerator._custom_objects)
    by_shard, whole = _split(objects)
    return save_sharded_state(target, by_shard, replicated=whole,
                              data={"step": accelerator.step}, step=accelerator.step, rng=True,
                              prepare_dir=prepare, on_commit=on_commit)


def load_sharded_accelerator_state(accelerator: Any, input_dir: Path) -> None:
    """Inverse of :func:`save_sharded_accelerator_state`: every object, ``accelerator.step``
    and this rank's RNG states. A collective (every rank).

    Load pre-hooks run first as ``hook(models, input_dir)``; a model they remove from the
    list is not loaded. Its optimizer cannot be loaded then either (DCP keys optimizer
    state by the owning model's parameter names), which raises a ``CheckpointError``.
    """
    models = list(accelerator._models)
    for hook in accelerator._load_model_state_pre_hook.values():
        hook(models, str(input_dir))
    objects = shared_objects([accelerator.unwrap_model(m) for m in models],
                             accelerator._optimizers, accelerator._schedulers, [],
                             scaler_of(accelerator), accelerator._custom_objects)
    objects.update(saved_dataloaders(input_dir, accelerator._dataloaders))
    by_shard, whole = _split(objects)
    loaded = load_sharded_state(input_dir, by_shard, replicated=whole, rng=True)
    accelerator.step = int((loaded.data or {}).get("step", loaded.step or 0))

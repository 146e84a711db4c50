"""``Accelerator.save_state``/``load_state`` and friends, on top of accel-checkpoint.

A checkpoint holds: each prepared model (its unwrapped weights, ``model``, ``model_1``,
...), optimizers, schedulers, the grad scaler, the position of every prepared dataloader
that is ``Stateful`` (accel-data's are; found by duck typing, accel-data is never
imported), ``register_for_checkpointing`` objects, the step, and every rank's RNG states.

How it is laid out is the strategy's choice (``Strategy.checkpoint_format(models)``,
resolved by :mod:`accel._checkpoint_layouts`): ``"replicated"`` (rank 0 writes full state
dicts as safetensors + JSON), ``"sharded"`` (every rank writes its DCP shards), or a
``RankCheckpointWriter`` of the strategy's own. The functions here call the layout's
methods and never ask which one it is. Loading lives in :mod:`accel._checkpoint_loading`,
what waits for an async save or a background check in :mod:`accel._checkpoint_gate`.
:class:`CheckpointingMixin` (in :mod:`accel._checkpoint_mixin`, which imports this module at
the first checkpoint call) gives the Accelerator its methods; ``accel.checkpointing``
(Accelerate's module path) re-exports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.hashing import digest_algorithm
from accel_checkpoint.manager import PendingSave, rotate_checkpoints
from accel_checkpoint.project import CHECKPOINT_PATTERN, ProjectConfiguration
from accel_checkpoint.weights import save_model_weights
from accel_state.errors import ConfigurationError

from accel._checkpoint_gate import (
    arm_gate,
    checkpoint_gate,
    checkpoint_sync_point,
    wait_for_checkpoint,
)
from accel._checkpoint_hooks import (
    hook_models,
    register_load_state_pre_hook,
    register_save_state_pre_hook,
)
from accel._checkpoint_layouts import checkpoint_layout
from accel._checkpoint_loading import load_state
from accel._checkpoint_objects import scaler_of, shared_objects, weights_module

__all__ = ["save_state", "load_state", "register_for_checkpointing",
           "register_save_state_pre_hook", "register_load_state_pre_hook", "save_model",
           "get_state_dict", "wait_for_checkpoint", "checkpoint_gate", "checkpoint_sync_point"]

def _stable_tensors(accelerator: Any) -> list[torch.Tensor]:
    """Tensors only an optimizer step changes: the prepared optimizers' parameters and
    state. An async save copies them after returning (gated by the next step)."""
    found: list[torch.Tensor] = []
    for optimizer in accelerator._optimizers:
        found += [p for group in optimizer.param_groups for p in group["params"]]
        found += [t for s in optimizer.state.values() for t in s.values()
                  if isinstance(t, torch.Tensor)]
    return found


def _output_dir(accelerator: Any, output_dir: str | os.PathLike[str] | None) -> Path:
    config = accelerator.project_configuration
    if config.automatic_checkpoint_naming:
        target = config.checkpoints_dir / f"checkpoint_{config.iteration}"
        if target.exists():
            raise ConfigurationError(
                f"Checkpoint directory {target} ({config.iteration}) already exists. Call "
                "accelerator.load_state() first to resume (it continues the numbering), or set "
                "accelerator.project_configuration.iteration to the next free number.")
        return target
    if output_dir is None:
        raise ConfigurationError("save_state() needs output_dir, or "
                                 "ProjectConfiguration(automatic_checkpoint_naming=True).")
    return Path(output_dir)


def save_state(accelerator: Any, output_dir: str | os.PathLike[str] | None = None,
               safe_serialization: bool = True, async_save: bool = False,
               **save_model_func_kwargs: Any) -> str:
    """Save everything needed to resume bit for bit; return the checkpoint path.

    Call it on every process. accel's own files are safetensors + JSON
    (``safe_serialization`` is accepted for compatibility); a strategy's writer chooses its
    own (see docs/checkpoint.md, "Checkpoint layouts and writers"). Save pre-hooks get the
    staging directory as ``output_dir``: what they write there is committed (and listed in
    the manifest) with the rest; their ``weights`` are the full state dicts of a replicated
    layout (popping one leaves that model to the hook) and ``[]`` when every rank writes its
    own files.
    ``async_save=True`` returns once the state is taken and writes in the background; the
    optimizers' parameters and state are copied on that thread too, so the next
    ``optimizer.step()`` waits until that copy is done (layouts that write on every rank
    warn and save synchronously).
    """
    wait_for_checkpoint(accelerator)
    target = _output_dir(accelerator, output_dir)
    config = accelerator.project_configuration
    layout = checkpoint_layout(accelerator)
    entries, weights = layout.save_entries([weights_module(accelerator, m)
                                            for m in accelerator._models])
    models_for_hooks = hook_models(accelerator)
    objects: dict[str, Any] = {}

    def prepare_dir(staging: Path) -> None:
        for hook in accelerator._save_model_state_pre_hook.values():
            hook(models_for_hooks, weights, str(staging))
        objects.update(shared_objects(entries, accelerator._optimizers,
                                      accelerator._schedulers, accelerator._dataloaders,
                                      scaler_of(accelerator), accelerator._custom_objects))

    with digest_algorithm(config.checkpoint_digest):
        result = layout.save(target, objects, data={"step": accelerator.step},
                             step=accelerator.step, async_save=async_save,
                             on_commit=_rotation(config), prepare_dir=prepare_dir,
                             save_on_each_node=config.save_on_each_node,
                             stable=_stable_tensors(accelerator) if async_save else ())
    if isinstance(result, PendingSave):
        accelerator._pending_checkpoint = result
        arm_gate(accelerator)
    config.iteration += 1
    return str(target)


def _rotation(config: ProjectConfiguration) -> Callable[[Path], None] | None:
    """The ``on_commit`` hook applying ``total_limit`` to automatically named checkpoints."""
    if not (config.automatic_checkpoint_naming and config.total_limit is not None):
        return None
    limit = config.total_limit

    def rotate(path: Path) -> None:
        rotate_checkpoints(path.parent, limit, CHECKPOINT_PATTERN, protect=path)
    return rotate


def register_for_checkpointing(accelerator: Any, *objects: Any) -> None:
    """Add objects (with ``state_dict``/``load_state_dict``) to every save and load.

    Checked as Accelerate checks (the attributes exist: proxies that forward them count), and
    refused as it refuses: a ``ValueError`` (here a ``ConfigurationError``) listing each."""
    bad = [(index, obj) for index, obj in enumerate(objects)
           if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))]
    if bad:
        items = "".join(f"\n\t- Item at index {index}, `{_pretty_name(obj)}`"
                        for index, obj in bad)
        raise ConfigurationError(
            "All `objects` must include a `state_dict` and `load_state_dict` function to be "
            f"stored. The following inputs are invalid:{items}\nGive each a state_dict() that "
            "returns its state and a load_state_dict(state) that restores it.")
    accelerator._custom_objects.extend(objects)


def _pretty_name(obj: Any) -> str:
    """A class's or function's own name, else its type's (as Accelerate names items)."""
    if not (hasattr(obj, "__qualname__") or hasattr(obj, "__name__")):
        obj = type(obj)
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))


def _full_state_dict(layout: Any, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layout's full state dict; for a model dispatched with CPU/disk offload (big-model
    hooks hold its weights, its parameters are meta) the weights the hooks hold."""
    from accel_inference.offload import get_state_dict_offloaded_model
    from accel_inference.tensors import has_offloaded_params

    if any(has_offloaded_params(sub) for sub in module.modules()):
        return get_state_dict_offloaded_model(module)
    return layout.full_state_dict(module)


def get_state_dict(accelerator: Any, model: torch.nn.Module, unwrap: bool = True
                   ) -> dict[str, torch.Tensor]:
    """The model's full state dict (of the unwrapped model by default).

    For a model whose checkpoint layout writes on every rank (FSDP2 / DTensor, an engine)
    it is a collective — call it on every process: the full tensors are gathered to CPU
    memory on the main process, the others get ``{}`` (as Accelerate's FSDP full state
    dict with ``rank0_only``)."""
    layout = checkpoint_layout(accelerator, [model])
    return _full_state_dict(layout, weights_module(accelerator, model) if unwrap else model)


def save_model(accelerator: Any, model: torch.nn.Module, save_directory: str | os.PathLike[str],
               max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> None:
    """Write the unwrapped weights (main process, or each machine's with save_on_each_node
    when every rank holds them): one file or shards + index."""
    layout = checkpoint_layout(accelerator, [model])
    state_dict = _full_state_dict(layout, weights_module(accelerator, model))
    each_node = (accelerator.project_configuration.save_on_each_node
                 and layout.full_state_on_every_rank)
    if accelerator.is_local_main_process if each_node else accelerator.is_main_process:
        save_model_weights(state_dict, save_directory, max_shard_size=max_shard_size,
                           safe_serialization=safe_serialization)

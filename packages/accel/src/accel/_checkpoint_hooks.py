"""Save/load state pre-hooks (``register_save_state_pre_hook`` / ``..._load_...``).

Scripts built on Accelerate (diffusers' training examples, most of them) register hooks
that save each model with ``save_pretrained`` and pop its weights from the list the
Accelerator would save, and on load pop each model and fill it from their own folder.
They are handed what Accelerate hands them: the models it tracks (the module inside
DDP, a DeepSpeed engine; :meth:`Strategy.tracked_model` says), and their pops are
honoured on both sides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.rollback import current_rollback
from torch.utils.hooks import RemovableHandle

__all__ = ["register_save_state_pre_hook", "register_load_state_pre_hook", "hook_models",
           "run_load_hooks"]


def register_save_state_pre_hook(accelerator: Any, hook: Any) -> RemovableHandle:
    """``hook(models, weights, output_dir)`` runs before saving; it may pop ``weights``
    entries (that model is then not saved by the Accelerator: the hook saved it)."""
    handle = RemovableHandle(accelerator._save_model_state_pre_hook)
    accelerator._save_model_state_pre_hook[handle.id] = hook
    return handle


def register_load_state_pre_hook(accelerator: Any, hook: Any) -> RemovableHandle:
    """``hook(models, input_dir)`` runs before loading; it may pop ``models`` entries
    (that model is then not loaded by the Accelerator: the hook loaded it)."""
    handle = RemovableHandle(accelerator._load_model_state_pre_hook)
    accelerator._load_model_state_pre_hook[handle.id] = hook
    return handle


def hook_models(accelerator: Any) -> list[Any]:
    """What save pre-hooks get: the models as Accelerate tracks them (the module a
    data-parallel wrapper holds, an engine; the strategy says), in ``prepare`` order."""
    return [accelerator._strategy.tracked_model(m) for m in accelerator._models]


def run_load_hooks(accelerator: Any, layout: Any, path: Path) -> list[torch.nn.Module]:
    """Run the load pre-hooks on ``path``; return the prepared models left for accel to load.

    The hooks get the models the layout would load from full state dicts (all of them for
    the replicated layout, none where a writer loads them itself), as Accelerate hands
    them over; a model a hook popped from that list it has loaded itself, so it is left
    out (a model never offered is always loaded). Inside a load that puts back what it
    changed when it fails (``accel_checkpoint.rollback``), the offered models are kept
    first (a CPU copy of their weights: a hook loads them its own way)."""
    models = list(accelerator._models)
    tracked = hook_models(accelerator)
    handed = layout.load_hook_models(tracked)
    offered = {id(t) for t in handed}
    hooks = list(accelerator._load_model_state_pre_hook.values())
    rollback = current_rollback()
    if hooks and rollback is not None:  # a hook may load them: kept, for a later failure
        for model, handed_model in zip(models, tracked, strict=True):
            if id(handed_model) in offered:
                rollback.keep(accelerator.unwrap_model(model, keep_torch_compile=False))
    for hook in hooks:
        hook(handed, str(path))
    kept = {id(t) for t in handed}
    return [m for m, t in zip(models, tracked, strict=True)
            if id(t) not in offered or id(t) in kept]

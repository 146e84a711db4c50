"""``load_state`` on a folder written by Hugging Face Accelerate's ``save_state``.

accel-checkpoint reads the files (``accel_checkpoint.accelerate_format``: torch files with
``weights_only=True``, numpy's RNG state through a named allow-list); this module puts
them into the Accelerator's prepared objects, in the order Accelerate numbered them
(models, optimizers and schedulers in ``prepare`` order, custom objects in
``register_for_checkpointing`` order).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from accel_checkpoint.accelerate_format import (
    read_accelerate_checkpoint,
    restore_accelerate_rng,
)
from accel_checkpoint.applying import apply_states
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.layouts import REPLICATED_LAYOUT

from accel._checkpoint_hooks import run_load_hooks
from accel._checkpoint_layouts import checkpoint_layout
from accel._checkpoint_objects import indexed, scaler_of

__all__ = ["load_accelerate_checkpoint"]


class _Model:
    """A model loaded with the caller's ``strict`` (checked by ``apply_states`` first)."""

    def __init__(self, module: Any, strict: bool) -> None:
        self.module, self.strict = module, strict

    def checked_module(self) -> tuple[Any, bool]:
        return self.module, self.strict

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state, strict=self.strict)


def _check_counts(path: Path, kind: str, saved: int, prepared: int) -> None:
    if saved != prepared:
        raise CheckpointError(
            f"{path} (an Accelerate checkpoint) holds {saved} {kind} state(s) but this "
            f"Accelerator has {prepared}; prepare (or register) the same objects, in the same "
            "order, as the run that saved it.")


def load_accelerate_checkpoint(accelerator: Any, path: Path, strict: bool = True) -> None:
    """Restore models, optimizers, schedulers, the grad scaler, registered objects, this
    rank's RNG states and ``accelerator.step`` from Accelerate's checkpoint at ``path``.
    Its files are read and checked first; then the load pre-hooks run, and the models
    they did not pop must match the model files in number."""
    layout = checkpoint_layout(accelerator)
    if layout.name != REPLICATED_LAYOUT:
        raise CheckpointError(
            f"{path} is an Accelerate checkpoint of full state dicts; this run's models are "
            f"saved in the {layout.name!r} layout, which it cannot be loaded into. Load it in "
            "a single-process or DDP run and save_state there, then resume from that.")
    checkpoint = read_accelerate_checkpoint(path, accelerator.process_index)
    optimizers = accelerator._optimizers
    schedulers, custom = accelerator._schedulers, accelerator._custom_objects
    _check_counts(path, "optimizer", len(checkpoint.optimizers), len(optimizers))
    _check_counts(path, "scheduler", len(checkpoint.schedulers), len(schedulers))
    _check_counts(path, "custom object", len(checkpoint.custom), len(custom))
    # As Accelerate: the load hooks first (a model saved by a hook, e.g. save_pretrained
    # into unet/, has no model.safetensors; the hook pops it and loads it), then the rest.
    models = run_load_hooks(accelerator, layout, path)
    _check_counts(path, "model", len(checkpoint.models), len(models))
    pairs = [(indexed("model", i),
              _Model(accelerator.unwrap_model(model, keep_torch_compile=False), strict), state)
             for i, (model, state) in enumerate(zip(models, checkpoint.models, strict=True))]
    for base, objects, states in (("optimizer", optimizers, checkpoint.optimizers),
                                  ("scheduler", schedulers, checkpoint.schedulers),
                                  ("custom_checkpoint", custom, checkpoint.custom)):
        pairs += [(f"{base}_{i}", obj, state)
                  for i, (obj, state) in enumerate(zip(objects, states, strict=True))]
    scaler = scaler_of(accelerator)
    if scaler is not None and checkpoint.scaler is not None:
        pairs.append(("scaler", scaler, checkpoint.scaler))
    # checked first (a refused load changes nothing); a failure part-way puts back what it
    # had changed, the RNG states included (the caller's all_or_nothing)
    apply_states(path, pairs, checkpoint.rng, restore_accelerate_rng)
    if checkpoint.rng is None:
        warnings.warn(f"{path} holds no RNG state for rank {accelerator.process_index}; this "
                      "rank's random draws will differ from the original run.", stacklevel=3)
    accelerator.step = checkpoint.step
    warnings.warn(f"Loaded {path}, a checkpoint written by Hugging Face Accelerate: it has no "
                  "manifest, so its files were checked by format only, not by checksum. "
                  "save_state writes accel's verified format from now on.", stacklevel=3)

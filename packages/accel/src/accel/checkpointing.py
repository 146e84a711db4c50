"""Accelerate's ``accelerate.checkpointing`` module path: re-exports only.

The Accelerator's checkpoint methods (:class:`CheckpointingMixin`) live in
``accel._checkpoint_mixin``, the work they delegate to (``save_state``, ``load_state``, ...)
in ``accel._checkpointing``, the checkpoint layouts in
``accel._checkpoint_layouts``, Accelerate's functional layer (``save_accelerator_state``,
``load_accelerator_state``, ``save_custom_state``, ``load_custom_state``) in
``accel._checkpoint_objects``; formats, files and weights are accel-checkpoint's.
"""

from __future__ import annotations

from accel_checkpoint.merge import merge_fsdp_weights
from accel_checkpoint.project import ProjectConfiguration
from accel_checkpoint.weights import save
from accel_inference.loading import load_checkpoint_in_model

from accel._checkpoint_mixin import CheckpointingMixin, init_checkpointing
from accel._checkpoint_objects import (
    load_accelerator_state,
    load_custom_state,
    save_accelerator_state,
    save_custom_state,
)
from accel._checkpointing import (
    get_state_dict,
    load_state,
    register_for_checkpointing,
    register_load_state_pre_hook,
    register_save_state_pre_hook,
    save_model,
    save_state,
    wait_for_checkpoint,
)
from accel._module_compat import forward_to

__all__ = ["ProjectConfiguration", "save_accelerator_state", "load_accelerator_state",
           "save_custom_state", "load_custom_state", "load_checkpoint_in_model",
           "init_checkpointing", "save_state", "load_state", "register_for_checkpointing",
           "register_save_state_pre_hook", "register_load_state_pre_hook", "save_model",
           "get_state_dict", "wait_for_checkpoint", "CheckpointingMixin",
           "merge_fsdp_weights", "save"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.logging")

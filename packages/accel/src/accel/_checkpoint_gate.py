"""What must finish before the Accelerator's state changes again, and where ranks meet.

An asynchronous save copies the optimizers' tensors after ``save_state`` returns, and a
checkpoint loaded with ``verify="background"`` is still being hash-checked: the next
optimizer step (or save, load, ``end_training``) waits for both (:func:`checkpoint_gate`,
armed on every prepared optimizer by :func:`arm_gate`). Used by the save and the load
(``accel._checkpointing``, ``accel._checkpoint_loading``).
"""

from __future__ import annotations

import functools
from typing import Any

from accel_checkpoint.coordination import sync_point
from accel_checkpoint.manager import wait_for_pending_saves, wait_for_staging

__all__ = ["wait_for_checkpoint", "checkpoint_sync_point", "checkpoint_gate", "arm_gate"]


def wait_for_checkpoint(accelerator: Any) -> None:
    """Block until the accelerator's asynchronous save (if any) is committed and the
    background verification of a loaded checkpoint (if any) has passed."""
    checkpoint_gate(accelerator)
    pending, accelerator._pending_checkpoint = getattr(accelerator, "_pending_checkpoint",
                                                       None), None
    if pending is not None:
        pending.wait()
    wait_for_pending_saves()


def checkpoint_sync_point(accelerator: Any, name: str) -> None:
    """Where ranks meet (``load_state``, ``wait_for_everyone``): a rank that is not in the
    main process's pending save says so, and waits for it to be committed, so a save made
    on the main process only costs no peer timeout and a load after it reads it whole."""
    sync_point(name, accelerator.project_configuration.save_on_each_node)


def checkpoint_gate(accelerator: Any) -> None:
    """What must finish before the state changes again (run before an optimizer step).

    An async save must have copied the parameters and optimizer state it defers; a
    checkpoint loaded with ``verify="background"`` must have passed its byte check —
    its failure is raised here, and again at every later gate (the loaded state is bad).
    """
    wait_for_staging()
    verification = getattr(accelerator, "_checkpoint_verification", None)
    if verification is not None:
        verification.wait()  # raises CorruptCheckpointError naming the file
        accelerator._checkpoint_verification = None
    for optimizer in accelerator._optimizers:
        optimizer._before_step = None


def arm_gate(accelerator: Any) -> None:
    """Make every prepared optimizer run :func:`checkpoint_gate` before its next step."""
    for optimizer in accelerator._optimizers:
        optimizer._before_step = functools.partial(checkpoint_gate, accelerator)  # picklable

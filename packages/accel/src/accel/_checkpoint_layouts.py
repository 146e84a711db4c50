"""Which checkpoint layout the Accelerator's models are saved in, and the refusal of a
checkpoint whose layout does not fit them.

The strategy names the layout (``Strategy.checkpoint_format(models)``: a name registered
with accel-checkpoint, or a ``RankCheckpointWriter`` of its own); accel-checkpoint's
registry turns it into a :class:`~accel_checkpoint.layouts.CheckpointLayout`, whose
methods the checkpoint functions call without asking which layout it is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.layouts import CHECKPOINT_LAYOUTS, CheckpointLayout, resolve_layout
from accel_state.errors import ConfigurationError

__all__ = ["checkpoint_layout", "check_layout"]


def checkpoint_layout(accelerator: Any,
                      models: Sequence[torch.nn.Module] | None = None) -> CheckpointLayout:
    """The layout ``accelerator.strategy`` saves ``models`` in (default: every prepared
    model), resolved through accel-checkpoint's layout registry."""
    strategy = accelerator.strategy
    choose = getattr(strategy, "checkpoint_format", None)
    if choose is None:
        raise ConfigurationError(
            f"The strategy {type(strategy).__name__} has no checkpoint_format(models): "
            "derive it from accel_parallel.Strategy, or give it that method (a layout name "
            "such as 'replicated', or a RankCheckpointWriter).")
    return resolve_layout(choose(list(accelerator._models if models is None else models)))


# Specific advice for the mismatches users meet; any other pair gets the general message.
_ADVICE = {
    ("sharded", "replicated"): (
        "{path} is a sharded checkpoint (saved by {world} process(es) from models with "
        "DTensor parameters, e.g. FSDP2), but no prepared model is sharded. Shard the model "
        "the same way (fully_shard) before accelerator.prepare and load_state, or merge the "
        "shards into full weights with `accel merge-weights {path} OUT` and load those with "
        "load_checkpoint_in_model(model, OUT)."),
    ("replicated", "sharded"): (
        "{path} is a replicated checkpoint (full state dicts, saved by {world} process(es) "
        "from unsharded models), but a prepared model is sharded (DTensor parameters, e.g. "
        "FSDP2). Load it into models prepared without fully_shard, or load its weights "
        "before sharding: load_checkpoint_in_model(model, '{path}'), then fully_shard(model) "
        "(the optimizer state then starts afresh)."),
}
_GENERAL = (
    "{path} is a {saved!r} checkpoint (saved by {world} process(es)), but the prepared "
    "models are saved in the {expected!r} layout by this run's strategy. Prepare the models "
    "the way they were prepared when it was saved (the same strategy and sharding) before "
    "load_state.")


def check_layout(saved: str, world_size: int, expected: str,
                 path: str | os.PathLike[str]) -> None:
    """Refuse a checkpoint of layout ``saved`` (its manifest's, with its ``world_size``)
    for models saved in layout ``expected``, saying the fix."""
    if saved == expected:
        return
    if saved not in CHECKPOINT_LAYOUTS:
        known = ", ".join(repr(n) for n in CHECKPOINT_LAYOUTS.names())
        raise CheckpointError(
            f"{path} has layout {saved!r}, which this accel does not know (it knows {known}; "
            f"the prepared models are saved in the {expected!r} layout). If a strategy's own "
            "writer saved it, prepare the models with that strategy; otherwise upgrade accel "
            "(or install the package that registers that layout in the "
            "'accel.checkpoint_layouts' entry-point group) to load it.")
    message = _ADVICE.get((saved, expected), _GENERAL)
    raise CheckpointError(message.format(path=path, world=world_size, saved=saved,
                                         expected=expected))

"""Which checkpoint layout the Accelerator's models are saved in, which loader reads a
checkpoint into them, and the refusal of a checkpoint whose layout cannot fit them.

The strategy names the layout (``Strategy.checkpoint_format(models)``: a name registered
with accel-checkpoint, or a ``RankCheckpointWriter`` of its own); accel-checkpoint's
registry turns it into a :class:`~accel_checkpoint.layouts.CheckpointLayout`, whose
methods the checkpoint functions call without asking which layout it is. A checkpoint of
another layout loads when accel-checkpoint can carry it across through full state dicts
(``"sharded"`` <-> ``"replicated"``: :mod:`accel_checkpoint.across_layouts`; a registered
writer's checkpoint with ``full_states`` into either, e.g. DeepSpeed ZeRO-1/2, whose
partitions accel-parallel's writer reads); any other pair is refused, naming both layouts
and the fix (the writer's own ``load_refusals`` where it has them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from accel_checkpoint.across_layouts import load_across_layouts, loads_across
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.layouts import (
    CHECKPOINT_LAYOUTS,
    CheckpointLayout,
    registered_writer,
    resolve_layout,
)
from accel_checkpoint.manifest import Manifest
from accel_state.errors import ConfigurationError

__all__ = ["checkpoint_layout", "check_layout", "layout_loader"]


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


_GENERAL = (
    "{path} is a {saved!r} checkpoint (saved by {world} process(es)), but the prepared "
    "models are saved in the {expected!r} layout by this run's strategy. Prepare the models "
    "the way they were prepared when it was saved (the same strategy and sharding) before "
    "load_state.")


def check_layout(saved: str, world_size: int, expected: str,
                 path: str | os.PathLike[str]) -> None:
    """Refuse a checkpoint of layout ``saved`` (its manifest's, with its ``world_size``)
    for models saved in layout ``expected`` unless it loads into them (the same layout,
    or one carried across by :func:`~accel_checkpoint.across_layouts.loads_across`),
    saying the fix."""
    if saved == expected or loads_across(saved, expected):
        return
    # a registered writer's own advice for what its models cannot load (DeepSpeed's)
    advice = getattr(registered_writer(expected), "load_refusals", {}).get(saved)
    if advice is not None:
        raise CheckpointError(advice.format(path=path, world=world_size, saved=saved))
    if saved not in CHECKPOINT_LAYOUTS:
        known = ", ".join(repr(n) for n in CHECKPOINT_LAYOUTS.names())
        raise CheckpointError(
            f"{path} has layout {saved!r}, which this accel does not know (it knows {known}; "
            f"the prepared models are saved in the {expected!r} layout). If a strategy's own "
            "writer saved it, prepare the models with that strategy; otherwise upgrade accel "
            "(or install the package that registers that layout in the "
            "'accel.checkpoint_layouts' entry-point group) to load it.")
    raise CheckpointError(_GENERAL.format(path=path, world=world_size, saved=saved,
                                          expected=expected))


def layout_loader(layout: CheckpointLayout, manifest: Manifest,
                  path: str | os.PathLike[str]) -> Callable[..., Any]:
    """What loads the checkpoint ``path`` (its ``manifest`` read) into models saved in
    ``layout``: the layout's own ``load``, or the full-state-dict loader across layouts;
    any other checkpoint is refused (:func:`check_layout`) before anything is read."""
    check_layout(manifest.layout, manifest.world_size, layout.name, path)
    if manifest.layout == layout.name:
        return layout.load
    return load_across_layouts

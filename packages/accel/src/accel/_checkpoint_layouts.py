"""Which checkpoint layout the Accelerator's models are saved in, which loader reads a
checkpoint into them, and the refusal of a checkpoint whose layout cannot fit them.

The strategy names the layout (``Strategy.checkpoint_format(models)``: a name registered
with accel-checkpoint, or a ``RankCheckpointWriter`` of its own); accel-checkpoint's
registry turns it into a :class:`~accel_checkpoint.layouts.CheckpointLayout`, whose
methods the checkpoint functions call without asking which layout it is. A checkpoint of
another layout loads when accel-checkpoint can carry it across through full state dicts
(``"sharded"`` <-> ``"replicated"``: :mod:`accel_checkpoint.across_layouts`; a DeepSpeed
ZeRO-1/2 checkpoint into either, its partitions read by accel-parallel); any other pair is
refused, naming both layouts and the fix.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.across_layouts import StateReader, load_across_layouts, loads_across
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.layouts import CHECKPOINT_LAYOUTS, CheckpointLayout, resolve_layout
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


# Specific advice for the pairs that cannot load across; any other pair gets the
# general message.
_INTO_DEEPSPEED = (
    "{path} is a {saved} checkpoint (saved by {world} process(es)), but the prepared models "
    "are DeepSpeed engines, which load only DeepSpeed's own checkpoints. Load its weights "
    "into the model before accelerator.prepare ({how}; the optimizer state then starts "
    "afresh), or prepare the models without DeepSpeed to resume it whole.")
_ADVICE = {
    ("replicated", "deepspeed"): _INTO_DEEPSPEED.replace(
        "{how}", "load_checkpoint_in_model(model, '{path}')"),
    ("sharded", "deepspeed"): _INTO_DEEPSPEED.replace(
        "{how}", "`accel merge-weights {path} OUT`, then load_checkpoint_in_model(model, OUT)"),
}


def _deepspeed_states(path: Path, manifest: Manifest, names: list[str],
                      owners: dict[str, str]) -> dict[str, Any]:
    """The full states of a DeepSpeed checkpoint's engines (accel-parallel reads ZeRO's
    partitions), only from files its manifest lists, each unpickled from the very bytes
    that were hash-checked as they were read."""
    from accel_checkpoint.hashing import verified_reader
    from accel_parallel.deepspeed.checkpoint import DEEPSPEED_DIR
    from accel_parallel.deepspeed.states import read_zero_full_states

    read: dict[str, Any] = {}
    states: dict[str, Any] = {}
    for name in names:
        tag = owners.get(name, name)  # an optimizer is saved with its model's engine
        if tag not in read:
            folder = path / DEEPSPEED_DIR / tag
            if not folder.is_dir():
                raise CheckpointError(f"{path} holds no DeepSpeed checkpoint for {tag!r} (no "
                                      f"{DEEPSPEED_DIR}/{tag}/): load it with the models "
                                      "named as when it was saved.")
            unlisted = sorted(p.name for p in folder.iterdir() if p.is_file()
                              and p.relative_to(path).as_posix() not in manifest.files)
            if unlisted:
                raise CheckpointError(f"{folder} holds files its manifest does not list "
                                      f"({', '.join(unlisted[:5])}): remove them.")
            read[tag] = read_zero_full_states(folder, verified_reader(path, manifest.files))
        weights, optimizer = read[tag]
        if name not in owners:
            states[name] = weights
        elif optimizer is not None:
            states[name] = optimizer
    return states


# Layouts of a strategy's own writer whose full states accel reads for other models.
_READERS: dict[str, StateReader] = {"deepspeed": _deepspeed_states}
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
    if saved == expected or loads_across(saved, expected, tuple(_READERS)):
        return
    advice = _ADVICE.get((saved, expected))
    if advice is not None:  # a layout of a strategy's own writer (DeepSpeed's) included
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
    return functools.partial(load_across_layouts, read_states=_READERS.get(manifest.layout))

"""Checkpoint layouts: one small interface for every way a checkpoint is laid out.

A layout is named in ``manifest.json`` (``layout``). Two kinds exist:

- ``"replicated"`` (:class:`ReplicatedLayout`): every rank holds the full state; rank 0
  writes the full state dicts, each rank its RNG states (:mod:`accel_checkpoint.manager`:
  async saves, ``save_on_each_node``, background verification).
- every rank writes its own files through a
  :class:`~accel_state.protocols.RankCheckpointWriter` (:class:`PerRankLayout` around it,
  :mod:`accel_checkpoint.per_rank`): DCP shards (``"sharded"``,
  :class:`~accel_checkpoint.dcp_writer.DCPWriter`), an engine's own checkpoint.

Both implement :class:`CheckpointLayout`, so a caller (``Accelerator.save_state``) asks
the layout instead of asking which one it holds. Layouts are found by name in
:data:`CHECKPOINT_LAYOUTS`, filled from the ``accel.checkpoint_layouts`` entry-point
group (the built-ins register there too); an entry is a ``CheckpointLayout`` or a
``RankCheckpointWriter`` (an instance, or a class called without arguments), and a
strategy may also hand a writer object directly (:func:`resolve_layout`).
"""

from __future__ import annotations

import abc
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from accel_state.protocols import UNPICKLES_NEVER, RankCheckpointWriter
from accel_state.registry import Registry

from accel_checkpoint.manager import LoadedCheckpoint, PendingSave, load_checkpoint, save_checkpoint
from accel_checkpoint.manifest import Manifest

__all__ = ["CHECKPOINT_LAYOUTS", "REPLICATED_LAYOUT", "CheckpointLayout", "ReplicatedLayout",
           "PerRankLayout", "resolve_layout", "registered_writer", "split_objects"]

#: ``manifest.json`` ``layout`` of the rank-0 format.
REPLICATED_LAYOUT = "replicated"

#: Layout name -> ``CheckpointLayout`` or ``RankCheckpointWriter`` (entry-point group
#: ``accel.checkpoint_layouts``). An unknown name lists the known ones.
CHECKPOINT_LAYOUTS: Registry[Any] = Registry("accel.checkpoint_layouts", "checkpoint layout")


class CheckpointLayout(abc.ABC):
    """What a caller needs from a layout, whichever it is. Subclasses set the attributes
    and implement every (abstract) method."""

    name: str
    """The manifest's ``layout``."""
    unpickles: str = UNPICKLES_NEVER
    """How loading reads the files (``RankCheckpointWriter.unpickles``)."""
    full_state_on_every_rank: bool = True
    """Whether :meth:`full_state_dict` returns the full state on every rank (else on rank 0
    only): who may write ``save_model`` weights with ``save_on_each_node``."""

    @abc.abstractmethod
    def save_entries(self, models: list[torch.nn.Module]) -> tuple[list[Any], list[Any]]:
        """``(entries, weights)`` for the (unwrapped) ``models``: ``entries`` are saved under
        ``model``, ``model_1``, ...; ``weights`` is the list save pre-hooks receive (and may
        pop entries from, to save a model themselves)."""

    def load_hook_models(self, models: list[Any]) -> list[Any]:
        """The list load pre-hooks receive: the models this layout loads from full state
        dicts (a hook popping one loads it itself, and the layout then does not)."""
        return list(models)

    @abc.abstractmethod
    def load_entry(self, model: torch.nn.Module, strict: bool = True) -> Any:
        """What to hand :meth:`load` for an (unwrapped) model (``strict``: its keys must match)."""

    @abc.abstractmethod
    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The model's full (unsharded) state dict (a collective for per-rank layouts)."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             data: Any = None, step: int | None = None, metadata: dict[str, Any] | None = None,
             rng: bool = True, async_save: bool = False, stable: Any = (),
             prepare_dir: Callable[[Path], Any] | None = None,
             on_commit: Callable[[Path], Any] | None = None,
             save_on_each_node: bool = False) -> Path | PendingSave | None:
        """Save ``objects`` (name -> object with ``state_dict``) crash-safely at ``path``;
        call it on every rank. See :func:`~accel_checkpoint.manager.save_checkpoint`."""

    @abc.abstractmethod
    def load(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             rng: bool = True, strict: bool = True, verify: str = "full",
             prepare: Callable[[Path], Any] | None = None, manifest: Manifest | None = None,
             trust_pickles: bool | None = None) -> LoadedCheckpoint:
        """Verify ``path`` and restore ``objects``; call it on every rank (a collective: a
        load that fails on any rank raises on every rank, and inside
        :func:`~accel_checkpoint.rollback.all_or_nothing` each rank puts back what it had
        changed). ``prepare(path)`` runs after the checks, before anything is read, and may
        fill ``objects`` (a dict). See :func:`~accel_checkpoint.manager.load_checkpoint`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _StrictLoad:
    """Loads a full state dict into a model with the caller's ``strict``."""

    def __init__(self, model: torch.nn.Module, strict: bool) -> None:
        self.model, self.strict = model, strict

    def checked_module(self) -> tuple[torch.nn.Module, bool]:
        """What :func:`~accel_checkpoint.applying.apply_states` checks the state against."""
        return self.model, self.strict

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state, strict=self.strict)


class _NonStrict:
    """A model of a per-rank layout loaded with ``strict=False`` (``load_entry``): the
    layout's load hands the writer the model and its name in ``non_strict``; a load across
    layouts reads the flag through ``checked_module``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def checked_module(self) -> tuple[torch.nn.Module, bool]:
        return self.model, False


class ReplicatedLayout(CheckpointLayout):
    """Rank 0 writes full state dicts (safetensors + JSON), each rank its RNG states."""

    name = REPLICATED_LAYOUT

    def save_entries(self, models: list[torch.nn.Module]) -> tuple[list[Any], list[Any]]:
        states = [self.full_state_dict(m) for m in models]
        return states, states  # one list: a hook popping a state dict drops it from the save

    def load_entry(self, model: torch.nn.Module, strict: bool = True) -> Any:
        return _StrictLoad(model, strict)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        return model.state_dict()

    def save(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             data: Any = None, step: int | None = None, metadata: dict[str, Any] | None = None,
             rng: bool = True, async_save: bool = False, stable: Any = (),
             prepare_dir: Callable[[Path], Any] | None = None,
             on_commit: Callable[[Path], Any] | None = None,
             save_on_each_node: bool = False) -> Path | PendingSave | None:
        return save_checkpoint(path, objects, data=data, step=step, rng=rng, metadata=metadata,
                               async_save=async_save, on_commit=on_commit,
                               prepare_dir=prepare_dir, stable=stable,
                               save_on_each_node=save_on_each_node)

    def load(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             rng: bool = True, strict: bool = True, verify: str = "full",
             prepare: Callable[[Path], Any] | None = None, manifest: Manifest | None = None,
             trust_pickles: bool | None = None) -> LoadedCheckpoint:
        from accel_checkpoint.rank_writers import dist_info
        from accel_checkpoint.rollback import agree_on

        # a collective: no rank keeps a load another rank failed (each puts back its own)
        return agree_on(path, dist_info()[2], lambda: load_checkpoint(
            path, objects, rng=rng, strict=strict, verify=verify, prepare=prepare,
            manifest=manifest))


def split_objects(objects: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Models and optimizers (saved rank by rank by a writer) apart from the rest (saved
    whole by rank 0)."""
    per_rank = {n: o for n, o in objects.items()
                if isinstance(o, (torch.nn.Module, torch.optim.Optimizer))}
    return per_rank, {n: o for n, o in objects.items() if n not in per_rank}


class PerRankLayout(CheckpointLayout):
    """Every rank writes its own files through ``writer``; the rest is whole from rank 0.

    Models and optimizers go to the writer (``save_entries`` hands it the live modules;
    save pre-hooks get ``weights == []``, as Accelerate's FSDP and DeepSpeed saves do);
    everything else (schedulers, dataloader positions, the scaler, custom objects) is
    written whole by rank 0. Saves are synchronous (``async_save`` warns); every byte is
    verified before loading (``verify="background"`` is treated as ``"full"``).
    """

    full_state_on_every_rank = False

    def __init__(self, writer: RankCheckpointWriter) -> None:
        from accel_checkpoint.rank_writers import check_writer

        self.writer = check_writer(writer)
        self.name = writer.layout
        self.unpickles = writer.unpickles

    def save_entries(self, models: list[torch.nn.Module]) -> tuple[list[Any], list[Any]]:
        return list(models), []

    def load_hook_models(self, models: list[Any]) -> list[Any]:
        """``[]``: the writer loads every model, before the hooks run (as Accelerate's FSDP
        and DeepSpeed loads do), so there is nothing for a hook to take over."""
        return []

    def load_entry(self, model: torch.nn.Module, strict: bool = True) -> Any:
        return model if strict else _NonStrict(model)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        own = getattr(self.writer, "full_state_dict", None)
        if own is not None:
            return own(model)
        from accel_checkpoint.dcp_writer import full_model_state_dict

        return full_model_state_dict(model)

    def save(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             data: Any = None, step: int | None = None, metadata: dict[str, Any] | None = None,
             rng: bool = True, async_save: bool = False, stable: Any = (),
             prepare_dir: Callable[[Path], Any] | None = None,
             on_commit: Callable[[Path], Any] | None = None,
             save_on_each_node: bool = False) -> Path | PendingSave | None:
        from accel_checkpoint.per_rank import save_rank_state

        if save_on_each_node:
            raise ConfigurationError(
                f"save_on_each_node=True cannot be used with the {self.name!r} checkpoint "
                "layout (sharded models, FSDP2/DTensor, or an engine's checkpoint): each rank "
                "writes only its own files, so a checkpoint needs a file system shared by all "
                "machines. Set ProjectConfiguration(save_on_each_node=False) and save to "
                "shared storage.")
        if async_save:
            warnings.warn(f"async_save=True is not supported by the {self.name!r} checkpoint "
                          "layout (every rank writes its own files): the checkpoint is saved "
                          "synchronously.", UserWarning, stacklevel=3)
        per_rank, whole = split_objects(objects)

        def prepare(staging: Path) -> None:  # it may still fill objects (a dict): split after
            if prepare_dir is not None:
                prepare_dir(staging)
            mine, rest = split_objects(objects)
            for part, new in ((per_rank, mine), (whole, rest)):
                part.clear()
                part.update(new)

        return save_rank_state(path, self.writer, per_rank, replicated=whole, data=data,
                               step=step, metadata=metadata, rng=rng, prepare_dir=prepare,
                               on_commit=on_commit)

    def load(self, path: str | os.PathLike[str], objects: Mapping[str, Any], *,
             rng: bool = True, strict: bool = True, verify: str = "full",
             prepare: Callable[[Path], Any] | None = None, manifest: Manifest | None = None,
             trust_pickles: bool | None = None) -> LoadedCheckpoint:
        from accel_checkpoint.per_rank import load_rank_state

        per_rank: dict[str, Any] = {}
        whole: dict[str, Any] = {}
        non_strict: set[str] = set()

        def split(checked: Path) -> None:  # after the checks and the caller's prepare
            if prepare is not None:
                prepare(checked)
            plain = {n: o.model if isinstance(o, _NonStrict) else o for n, o in objects.items()}
            non_strict.update(n for n, o in objects.items() if isinstance(o, _NonStrict))
            mine, rest = split_objects(plain)
            per_rank.update(mine)
            whole.update(rest)

        loaded = load_rank_state(path, self.writer, per_rank, strict=strict, replicated=whole,
                                 rng=rng, prepare=split, trust_pickles=trust_pickles,
                                 non_strict=non_strict)
        return LoadedCheckpoint(loaded.path, loaded.manifest, loaded.data, loaded.step, None)

    def __repr__(self) -> str:
        return f"PerRankLayout({self.writer!r})"


def registered_writer(name: str) -> Any | None:
    """The :class:`~accel_state.protocols.RankCheckpointWriter` registered as layout
    ``name`` (for what it can do without a run of its own: ``full_states``,
    ``load_refusals``), or None when no per-rank writer is registered under that name."""
    if name not in CHECKPOINT_LAYOUTS:
        return None
    layout = resolve_layout(name)
    return layout.writer if isinstance(layout, PerRankLayout) else None


def resolve_layout(spec: Any) -> CheckpointLayout:
    """The :class:`CheckpointLayout` for ``spec``: a registered name (an unknown one lists
    the known ones), a ``CheckpointLayout``, or a ``RankCheckpointWriter`` (wrapped in a
    :class:`PerRankLayout`); a registered class is instantiated without arguments."""
    named = spec if isinstance(spec, str) else None
    if named is not None:
        spec = CHECKPOINT_LAYOUTS.get(named)
    if isinstance(spec, type):
        spec = spec()
    if isinstance(spec, CheckpointLayout):
        layout = spec
    elif isinstance(spec, RankCheckpointWriter):
        layout = PerRankLayout(spec)
    else:
        raise ConfigurationError(
            f"{spec!r} is not a checkpoint layout: give a layout name ("
            f"{', '.join(CHECKPOINT_LAYOUTS.names())}), a CheckpointLayout, or a "
            "RankCheckpointWriter (accel_state.protocols).")
    if named is not None and layout.name != named.lower():
        raise ConfigurationError(f"The checkpoint layout registered as {named!r} says its name "
                                 f"is {layout.name!r}: register it under its own name.")
    return layout

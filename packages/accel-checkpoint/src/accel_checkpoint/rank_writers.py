"""The writer side of per-rank checkpoints: who may write, what, and who may unpickle.

:func:`check_writer` accepts a :class:`~accel_state.protocols.RankCheckpointWriter` only
with a usable ``layout`` and ``unpickles``; :func:`sharded_objects` names the kinds of the
objects it saves (recorded in the manifest); :func:`pickle_problem` is the pickle rule
(DESIGN.md §5): a writer whose load runs a full unpickler (``unpickles ==
"arbitrary"``) loads only with an explicit opt-in, only files its manifest lists, and
only after their bytes were verified (the caller hashes them first). Small collective
helpers (every rank sees the same value) live here too, and :func:`clean_leftovers_together`,
the leftover cleaning of a per-rank load, done once every rank has entered it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accel_state import env
from accel_state.protocols import UNPICKLES_ARBITRARY, UNPICKLES_VALUES, RankCheckpointWriter
from torch import nn

from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.hashing import verified_reader
from accel_checkpoint.leftovers import clean_leftovers
from accel_checkpoint.manifest import Manifest
from accel_checkpoint.saving import check_name

__all__ = ["OBJECTS_KEY", "UNPICKLES_KEY", "check_writer", "sharded_objects", "whole_objects",
           "pickle_problem", "load_options", "dist_info", "broadcast", "gather", "listing",
           "clean_leftovers_together"]

#: Key of ``manifest.metadata`` naming the objects the writer saved and their kinds.
OBJECTS_KEY = "sharded_objects"
#: Key of ``manifest.metadata`` recording the writer's ``unpickles`` (for inspection).
UNPICKLES_KEY = "unpickles"
_RESERVED = ("replicated",)


def dist_info() -> tuple[int, int, bool]:
    """``(rank, world size, whether a process group is up)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return 0, 1, False


def broadcast(value: Any, on: bool) -> Any:
    """Rank 0's ``value`` on every rank (a small JSON-like object)."""
    if not on:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(value: Any, on: bool) -> list[Any]:
    """Every rank's ``value`` (a small JSON-like object), in rank order, on every rank."""
    if not on:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def check_writer(writer: Any) -> RankCheckpointWriter:
    """``writer`` if it is a usable ``RankCheckpointWriter``, else a ``CheckpointError``
    saying what is missing."""
    if not isinstance(writer, RankCheckpointWriter):
        raise CheckpointError(
            f"{type(writer).__name__} is not a RankCheckpointWriter: give an object with "
            "layout, unpickles, save(staging, objects, rank, world_size) and load(path, "
            "objects, rank, world_size) (accel_state.protocols).")
    layout = writer.layout
    if (not isinstance(layout, str) or not layout or layout != layout.lower()
            or layout in _RESERVED or not all(c.isalnum() or c in "-_." for c in layout)):
        raise CheckpointError(
            f"{type(writer).__name__}.layout={layout!r} is not a usable layout name: use "
            "lowercase letters, digits, '-', '_' or '.', and not 'replicated' (the rank-0 "
            "format's name).")
    if writer.unpickles not in UNPICKLES_VALUES:
        raise CheckpointError(
            f"{type(writer).__name__}.unpickles={writer.unpickles!r}: use one of "
            f"{', '.join(map(repr, UNPICKLES_VALUES))}.")
    return writer


def _kind(obj: Any) -> str:
    if isinstance(obj, nn.Module):
        return "model"
    if isinstance(obj, torch.optim.Optimizer):
        return "optimizer"
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return "stateful"
    raise CheckpointError(f"Cannot save {type(obj).__name__} in a per-rank checkpoint: give "
                          "nn.Module, torch.optim.Optimizer or objects with state_dict()/"
                          "load_state_dict().")


def sharded_objects(objects: Mapping[str, Any]) -> dict[str, str]:
    """``name -> kind`` (``model``, ``optimizer``, ``stateful``), names checked."""
    return {check_name(name): _kind(obj) for name, obj in objects.items()}


def whole_objects(replicated: Mapping[str, Any] | None, kinds: dict[str, str]) -> dict[str, Any]:
    """``replicated`` with its names checked (none may also name a writer-saved object)."""
    whole = {check_name(name): obj for name, obj in (replicated or {}).items()}
    clash = sorted(set(whole) & set(kinds))
    if clash:
        raise CheckpointError(f"{clash} given both in objects and in replicated=: give each "
                              "name once (models and optimizers in objects, the rest in "
                              "replicated=).")
    bad = sorted(n for n, o in whole.items()
                 if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")))
    if bad:
        raise CheckpointError(f"replicated= entries {bad} have no state_dict()/"
                              "load_state_dict(): give objects that have both.")
    return whole


def pickle_problem(path: Path, manifest: Manifest, writer: RankCheckpointWriter,
                   trust_pickles: bool | None) -> str | None:
    """Why ``writer`` may not load ``path`` (``None``: it may).

    A writer whose load runs a full unpickler (``unpickles == "arbitrary"``) loads only
    with ``trust_pickles`` (``None``: ``ACCEL_CHECKPOINT_TRUST_PICKLES``), and only when
    the directory holds nothing its manifest does not list (an unlisted file would be
    read unverified, e.g. found by a glob). Other writers never unpickle arbitrary objects.
    """
    if writer.unpickles != UNPICKLES_ARBITRARY:
        return None
    trusted = trust_pickles if trust_pickles is not None else \
        env.CHECKPOINT_TRUST_PICKLES.get_bool(False)
    if not trusted:
        return (f"{path} is a {writer.layout!r} checkpoint, whose writer "
                f"({type(writer).__name__}) reads its files with a full unpickler, which can "
                "run code stored in them. accel loads it only if you trust where it comes "
                "from: pass trust_pickles=True (load_state / load_rank_state) or set "
                f"{env.CHECKPOINT_TRUST_PICKLES.name}=1. Its files are verified against "
                "the manifest first either way.")
    unlisted = sorted(listing(path) - set(manifest.files) - {MANIFEST_NAME})
    if unlisted:
        return (f"{path} holds files its manifest does not list ({', '.join(unlisted[:5])}); "
                f"the {writer.layout!r} writer unpickles what it reads and could read them "
                "unverified: remove them (they were not written by the save).")
    return None


def load_options(path: Path, writer: RankCheckpointWriter, manifest: Manifest,
                 non_strict: set[str]) -> dict[str, Any]:
    """The keyword arguments ``writer.load`` says it takes: ``read`` (a hash-checked
    reader: :func:`~accel_checkpoint.hashing.verified_reader`) when it ``reads_verified``,
    ``non_strict`` (model names) when any; refused if the writer cannot load non-strictly."""
    options: dict[str, Any] = {}
    if getattr(writer, "reads_verified", False):  # it parses what it reads: checked bytes
        options["read"] = verified_reader(path, manifest.files)
    if non_strict and not getattr(writer, "loads_non_strict", False):
        raise CheckpointError(
            f"strict=False cannot load {sorted(non_strict)} from {path}: the {writer.layout!r} "
            f"writer ({type(writer).__name__}) loads models only strictly (it has no "
            "loads_non_strict). Load with strict=True, or give the writer a load(..., "
            "non_strict=names) and loads_non_strict = True.")
    if non_strict:
        options["non_strict"] = frozenset(non_strict)
    return options


def listing(directory: Path) -> set[str]:
    """Relative POSIX paths of the files under ``directory``."""
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


def clean_leftovers_together(parent: Path, rank: int, on: bool) -> list[str]:
    """A collective: once every rank has arrived (so none of them is still writing a
    save of this job), rank 0 cleans ``parent`` of what interrupted saves and rotations
    left (:func:`~accel_checkpoint.leftovers.clean_leftovers`; what another live job holds
    stays) while the others wait; every rank returns the names cleaned."""
    gather(None, on)  # everyone is here
    done = [p.name for p in clean_leftovers(parent)] if rank == 0 else None
    return broadcast(done, on)  # and nobody reads before rank 0 is done

"""Small structural protocols that sibling packages share without importing each other.

``Stateful`` is torch.distributed.checkpoint's notion of a checkpointable object: anything
with ``state_dict()`` and ``load_state_dict(state)``. accel-data's loaders implement it and
accel-checkpoint saves whatever implements it, so neither imports the other.

``RankCheckpointWriter`` is how a strategy (accel-parallel, or a third party's engine)
hands accel-checkpoint the files of a checkpoint that every rank writes for itself
(DCP shards of FSDP2 models, an engine's own checkpoint): accel-checkpoint runs the
crash-safe protocol around it (staging directory, hashes, manifest, one commit) and
calls the writer to write and read its files, without the two packages importing each
other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["Stateful", "RankCheckpointWriter", "UNPICKLES_NEVER", "UNPICKLES_RESTRICTED",
           "UNPICKLES_ARBITRARY", "UNPICKLES_VALUES"]

#: The writer's files are read without any unpickling (safetensors, JSON, raw bytes).
UNPICKLES_NEVER = "never"
#: The writer reads pickles, but only through ``torch.load(weights_only=True)`` (with an
#: explicit allow-list, ``torch.serialization.safe_globals([...])``, where it needs more
#: than tensors and containers) or an allow-list unpickler of its own: no code of the
#: file's choosing can run. Loaded like ``"never"``.
UNPICKLES_RESTRICTED = "restricted"
#: The writer's load runs a full unpickler (``torch.load(weights_only=False)``, plain
#: ``pickle``): such a checkpoint is only loaded after an explicit opt-in.
UNPICKLES_ARBITRARY = "arbitrary"
UNPICKLES_VALUES = (UNPICKLES_NEVER, UNPICKLES_RESTRICTED, UNPICKLES_ARBITRARY)


@runtime_checkable
class Stateful(Protocol):
    """An object whose state can be saved and restored (modules, optimizers, loaders, ...)."""

    def state_dict(self) -> dict[str, Any]:
        """The object's state: tensors and plain data (dict, list, str, int, float, ...)."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any:
        """Restore the state returned by :meth:`state_dict`."""
        ...


@runtime_checkable
class RankCheckpointWriter(Protocol):
    """Writes and reads the files of a checkpoint in which every rank writes its own part.

    accel-checkpoint (``accel_checkpoint.per_rank``) owns the protocol around it: it makes
    the staging directory, runs the save hooks, calls :meth:`save` on every rank, hashes
    the files each rank reports, writes the objects whose state is the same everywhere
    (schedulers, dataloader positions, ...) whole from rank 0 and each rank's RNG states,
    lists everything in ``manifest.json`` (``layout`` = :attr:`layout`) and commits with
    one atomic rename only if every rank succeeded. On load it checks the manifest, the
    layout and every byte of every file (the ranks share the hashing) before it calls
    :meth:`load`. DCP (``accel_checkpoint.DCPWriter``, layout ``"sharded"``) is the worked
    example; a strategy returns its writer from ``Strategy.checkpoint_format(models)``.

    Pickles (DESIGN.md §5: loading never unpickles arbitrary objects). :attr:`unpickles`
    says how :meth:`load` reads the files: ``"never"`` (no pickle at all),
    ``"restricted"`` (``torch.load(weights_only=True)``, with an explicit allow-list of
    classes where needed, or an allow-list unpickler; DCP's ``.metadata``) or
    ``"arbitrary"`` (a full unpickler: an engine whose loader cannot be made to read with
    ``weights_only=True``). ``"never"`` and ``"restricted"`` load like any checkpoint. An
    ``"arbitrary"`` writer's checkpoint is loaded only with ``trust_pickles=True`` (or
    ``ACCEL_CHECKPOINT_TRUST_PICKLES=1``), only when the directory holds no file its
    manifest does not list, and only after every byte matched the manifest, i.e. the bytes
    this library hashed when it saved them. The hashes catch damage, not an attacker who
    can rewrite the files and the manifest beside them: the opt-in says "I trust where
    this checkpoint comes from".

    Optional: ``full_state_dict(model) -> dict`` (the model's full state dict on the main
    process, ``{}`` elsewhere; a collective) for ``Accelerator.get_state_dict`` /
    ``save_model``; without it torch's ``get_model_state_dict(full_state_dict=True,
    cpu_offload=True)`` is used. ``full_states(path, names, owners, listed, read) ->
    {name: full state}``: the saved objects ``names`` as full states (models as state
    dicts, optimizers keyed by parameter name or position; ``owners``: optimizer name ->
    its model's name), read only from files in ``listed`` (the manifest's, relative POSIX
    paths) through ``read(path) -> bytes`` (hash-checked) — with it, a checkpoint of this
    layout loads into models of the full-state layouts (``accel_checkpoint.across_layouts``;
    the writer must then be registered, callable without arguments, in the
    ``accel.checkpoint_layouts`` entry-point group). ``load_refusals``: ``{saved layout:
    message}`` for checkpoints of other layouts this writer's models cannot load, the
    message formatted with ``path``, ``world`` and ``saved``.
    """

    layout: str
    """Name recorded as the manifest's ``layout`` and compared on load (lowercase letters,
    digits, ``-``, ``_``, ``.``); ``"replicated"`` is taken by the rank-0 format."""
    unpickles: str
    """``"never"``, ``"restricted"`` or ``"arbitrary"`` (see the class docstring)."""

    def save(self, staging: Path, objects: Mapping[str, Any], rank: int,
             world_size: int) -> list[str]:
        """Write this rank's files for ``objects`` into ``staging`` (shared by all ranks);
        return their paths relative to ``staging``, POSIX-style.

        ``objects`` maps names to the objects saved rank by rank (models, optimizers);
        it is the same on every rank. Called on every rank at the same time (collectives
        allowed). Two ranks must not report the same file; rank 0 may also write and
        report shared files (metadata). Do not write ``manifest.json``, ``_data.json``,
        ``random_states_*`` or ``<object name>.json`` / ``.safetensors`` (the protocol's
        own files); raise an ``Exception`` on failure (nothing is committed then).
        """
        ...

    def load(self, path: Path, objects: Mapping[str, Any], rank: int, world_size: int) -> None:
        """Restore ``objects`` (the names this writer saved) from the committed checkpoint
        ``path``, on every rank at the same time; every file in its manifest has already
        been verified. Read only files :meth:`save` reported (nothing else is verified)."""
        ...

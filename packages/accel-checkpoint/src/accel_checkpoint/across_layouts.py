"""Loading a checkpoint into models prepared in another layout: sharded <-> replicated.

A ``"sharded"`` checkpoint (FSDP2 / DTensor models, DCP shards from every rank) loads into
models that are not sharded (DDP, one process), and a ``"replicated"`` one (full state
dicts from rank 0) into sharded models, optimizer state included. Both go through full
state dicts:

1. the manifest is checked and every file is hash-checked first, the ranks sharing the
   work; a problem found by any rank is raised on every rank, before anything changes;
2. every rank reads the full states: DCP rebuilds the whole saved state dict from its
   shards (any number of them: the saving world size does not matter), each shard's
   bytes hash-checked again as they are read (one file in memory at a time), a replicated
   checkpoint's safetensors + JSON are read as they are (each file digest-checked again
   on the very bytes read). A replicated optimizer state keys parameters by position; it
   is keyed by the owning model's parameter names (DCP's form) here;
3. the states are checked against the prepared objects (keys, shapes, parameter groups
   and the shape of every per-parameter optimizer tensor): a misfit is refused, nothing
   changed;
4. ``torch.distributed.checkpoint.state_dict``'s ``set_model_state_dict`` /
   ``set_optimizer_state_dict`` with ``full_state_dict=True`` put them in place: a full
   tensor is cut into this rank's DTensor shard, or copied whole into an unsharded model.

Every rank holds the full state while loading (as a full-state-dict load does). The
objects saved whole (schedulers, dataloader positions, the scaler, registered objects,
RNG states, the step) are stored the same way in every layout and load as usual.

A strategy's own writer's checkpoint (DeepSpeed's) loads the same way when that writer is
registered in the ``accel.checkpoint_layouts`` entry-point group and has ``full_states``
(:func:`full_state_reader`: step 2 reads through it, from the files the manifest lists, each
hash-checked as read), or when the caller gives a :data:`StateReader`: accel-checkpoint
never imports a strategy package.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from accel_state import ConfigurationError
from torch import nn

from accel_checkpoint.applying import apply_states, refuse_misfits, state_problem
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.fileio import read_json
from accel_checkpoint.hashing import verified_reader
from accel_checkpoint.layouts import registered_writer
from accel_checkpoint.manager import LoadedCheckpoint, read_object
from accel_checkpoint.manifest import Manifest, verify_checkpoint
from accel_checkpoint.rank_writers import OBJECTS_KEY, dist_info, gather
from accel_checkpoint.rollback import agree_on, all_or_nothing
from accel_checkpoint.saving import DATA_NAME, rng_name

__all__ = ["FULL_STATE_LAYOUTS", "StateReader", "full_state_reader", "loads_across",
           "load_across_layouts"]

#: Layouts whose models and optimizers can be read as, and loaded from, full state dicts.
FULL_STATE_LAYOUTS = ("replicated", "sharded")

#: ``read_states(path, manifest, names, owners) -> {name: full state}``: the full states of
#: the objects a strategy's own writer saved (``owners``: optimizer name -> its model's
#: name), models as state dicts, optimizers keyed by parameter name (or by position).
StateReader = Callable[[Path, Manifest, list[str], dict[str, str]], dict[str, Any]]
_DATA_FILE = "_data.json"  # where the per-rank protocol keeps the plain data
_SHOWN = 5


def full_state_reader(layout: str) -> StateReader | None:
    """The :data:`StateReader` of the per-rank writer registered as ``layout`` when it has
    ``full_states`` (see ``accel_state.protocols.RankCheckpointWriter``), else None. It
    reads only files the manifest lists, each through the hash-checked reader."""
    writer = registered_writer(layout) if layout not in FULL_STATE_LAYOUTS else None
    full_states = getattr(writer, "full_states", None)
    if full_states is None:
        return None

    def read(path: Path, manifest: Manifest, names: list[str],
             owners: dict[str, str]) -> dict[str, Any]:
        try:
            return full_states(path, names, owners, set(manifest.files),
                               verified_reader(path, manifest.files))
        except ConfigurationError as exc:  # the writer's refusal, a checkpoint's problem here
            raise CheckpointError(str(exc)) from None

    return read


def loads_across(saved: str, expected: str, readable: tuple[str, ...] = ()) -> bool:
    """Whether a checkpoint of layout ``saved`` loads into models saved as ``expected``
    (another layout) through full state dicts: the full-state layouts, a registered writer
    with ``full_states`` (:func:`full_state_reader`), and ``readable`` (layouts the caller
    gives a :data:`StateReader` for)."""
    if saved == expected or expected not in FULL_STATE_LAYOUTS:
        return False
    return (saved in (*FULL_STATE_LAYOUTS, *readable)
            or full_state_reader(saved) is not None)


class _Checked:
    """A module with the caller's ``strict``, as :func:`~accel_checkpoint.applying.
    state_problem` checks it."""

    def __init__(self, module: nn.Module, strict: bool) -> None:
        self.module, self.strict = module, strict

    def checked_module(self) -> tuple[nn.Module, bool]:
        return self.module, self.strict


def _module_of(obj: Any, strict: bool) -> tuple[nn.Module, bool] | None:
    """The module a model entry loads into (a module, or a ``checked_module()`` wrapper)."""
    if isinstance(obj, nn.Module):
        return obj, strict
    checked = getattr(obj, "checked_module", None)
    return checked() if callable(checked) else None


def _inner(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The torch optimizer behind a wrapper (torch's state-dict helpers step it)."""
    return getattr(optimizer, "optimizer", optimizer)


def _owner(optimizer: torch.optim.Optimizer, modules: dict[str, nn.Module]) -> nn.Module:
    from accel_checkpoint.dcp_writer import owner_model  # imports torch's DCP: only when used

    return owner_model(optimizer, modules, "load")


def _param_names(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name in ``module`` of each of ``optimizer``'s parameters, in the optimizer's order."""
    names: dict[int, str] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)  # a tied parameter goes by its first name, as torch's
    order = [p for group in optimizer.param_groups for p in group["params"]]
    missing = [i for i, p in enumerate(order) if id(p) not in names]
    if missing:
        raise CheckpointError(f"Parameters {missing} of an optimizer are not parameters of the "
                              "model it is loaded with: load each optimizer with its own model.")
    return [names[id(p)] for p in order]


def _keyed_by_name(state: Any, names: list[str]) -> Any:
    """A torch optimizer state dict (parameters by position) keyed by parameter name instead,
    as ``set_optimizer_state_dict`` takes it; a state already keyed by name is kept."""
    if not isinstance(state, dict) or not isinstance(state.get("param_groups"), list):
        return state
    positions = [p for g in state["param_groups"] for p in g.get("params", ())]
    if not all(isinstance(p, int) for p in positions):
        return state  # keyed by name (DCP's form), or malformed: the checks say which

    def name(position: int) -> Any:
        return names[position] if 0 <= position < len(names) else position

    return {"state": {name(k): v for k, v in state.get("state", {}).items()},
            "param_groups": [{**g, "params": [name(p) for p in g.get("params", ())]}
                             for g in state["param_groups"]]}


def _optimizer_problem(module: nn.Module, optimizer: torch.optim.Optimizer,
                       state: Any) -> str | None:
    """Why a name-keyed optimizer state cannot load into ``optimizer`` (of ``module``)."""
    basic = state_problem(_inner(optimizer), state)
    if basic is not None:
        return basic
    params = dict(module.named_parameters(remove_duplicate=False))
    order = iter(_param_names(module, optimizer))
    own = [[next(order) for _ in g["params"]] for g in optimizer.param_groups]
    for index, (group, names) in enumerate(zip(state["param_groups"], own, strict=True)):
        if set(group["params"]) != set(names):
            other = sorted(str(n) for n in set(group["params"]) ^ set(names))
            return (f"parameter group {index} holds other parameters than the optimizer's "
                    f"({', '.join(other[:_SHOWN])})")
    shapes = [f"{n}.{key} {tuple(value.shape)} (the parameter has {tuple(params[n].shape)})"
              for n, values in state.get("state", {}).items() if n in params
              and isinstance(values, dict)
              for key, value in values.items()
              if isinstance(value, torch.Tensor) and value.dim() > 0
              and value.shape != params[n].shape]
    if shapes:
        return f"shape mismatch: {', '.join(shapes[:_SHOWN])}"
    return None


def _read_dcp_full(path: Path, manifest: Manifest) -> dict[str, Any]:
    """Every model and optimizer state of a DCP checkpoint, whole (on this rank alone)."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeFullLoadPlanner, VerifiedReader
    from accel_checkpoint.dcp_writer import raise_dcp_error

    state: dict[str, Any] = {}
    # every shard's bytes hash-checked as they are read (into a dict no object shares)
    reader = VerifiedReader(path, manifest.files.get(DCP_METADATA_NAME), files=manifest.files)
    with warnings.catch_warnings():  # no_dist: this rank reads every shard by itself
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        try:
            # the loader that fills an empty dict (dcp.load keeps only keys given to it)
            _load_state_dict(state, storage_reader=reader, planner=SafeFullLoadPlanner(),
                             no_dist=True)
        except CheckpointException as exc:
            raise_dcp_error(exc, path, "read")
    return state


def _saved_names(manifest: Manifest) -> set[str]:
    """Names of the saved objects (of both layouts)."""
    return set(manifest.objects) | set(manifest.metadata.get(OBJECTS_KEY, {}))


def _read_states(path: Path, manifest: Manifest, names: list[str], owners: dict[str, str],
                 read_states: StateReader | None) -> dict[str, Any]:
    """The saved state of each of ``names``: whole from DCP (or ``read_states``) for what
    a per-rank layout's writer saved (models, optimizers), from safetensors + JSON for the
    rest."""
    in_writer = set(manifest.metadata.get(OBJECTS_KEY, {})) & set(names) \
        if manifest.layout != "replicated" else set()
    if not in_writer:
        found: dict[str, Any] = {}
    elif manifest.layout == "sharded":
        found = _read_dcp_full(path, manifest)
    else:
        found = read_states(path, manifest, sorted(in_writer), owners)  # type: ignore[misc]
    absent = sorted(n for n in in_writer if n not in found)
    if absent:
        raise CheckpointError(f"{path}: the {manifest.layout!r} files hold no {absent}, which "
                              "the manifest lists.")
    return {n: found[n] if n in in_writer else read_object(path, n, manifest) for n in names}


def _read_data(path: Path, manifest: Manifest) -> Any:
    if DATA_NAME in manifest.objects:
        return read_object(path, DATA_NAME, manifest)
    if _DATA_FILE in manifest.files:
        return read_json(path / _DATA_FILE, manifest.files[_DATA_FILE])
    return None


def _split(objects: Mapping[str, Any], strict: bool
           ) -> tuple[dict[str, tuple[nn.Module, bool]], dict[str, Any], dict[str, Any]]:
    models = {n: m for n, o in objects.items() if (m := _module_of(o, strict)) is not None}
    optimizers = {n: o for n, o in objects.items() if isinstance(o, torch.optim.Optimizer)}
    rest = {n: o for n, o in objects.items() if n not in models and n not in optimizers}
    return models, optimizers, rest


def _check_share(path: Path, manifest: Manifest, rank: int, world: int) -> str | None:
    """Hash this rank's share of the files (every file by one rank); a problem, or None."""
    from accel_checkpoint.per_rank import _check_share as check_share  # the same-layout pass

    problem = check_share(path, manifest, rank, world)
    return None if problem is None else f"corrupt\0{problem}"


def _agree(problem: str | None, on: bool) -> None:
    """Raise the first problem any rank found, on every rank alike (or return)."""
    found = sorted(p for p in gather(problem, on) if p)
    if not found:
        return
    kind, rest = found[0].split("\0", 1)
    if kind == "corrupt":
        where, what = rest.split("\0", 1)
        raise CorruptCheckpointError(where, what)
    raise CheckpointError(rest)


def _attempt(step: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return step(), None
    except CorruptCheckpointError as exc:
        return None, f"corrupt\0{exc.path}\0{exc.problem}"
    except Exception as exc:  # any rank's failure stops every rank, none changed
        text = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
        return None, f"error\0{text}"


def _missing(path: Path, manifest: Manifest, wanted: list[str], strict: bool) -> list[str]:
    """The ``wanted`` names the checkpoint has; an absent one is an error with ``strict``
    (else a warning: that object keeps its state)."""
    saved = _saved_names(manifest)
    absent = [n for n in wanted if n not in saved]
    if absent and strict:
        have = ", ".join(sorted(n for n in saved if n != DATA_NAME and not n.startswith(
            "random_states_"))) or "none"
        raise CheckpointError(f"{path} has no object(s) {absent} (it has: {have}).")
    if absent:
        warnings.warn(f"{path} has no object(s) {absent}; they keep their state.", stacklevel=4)
    return [n for n in wanted if n in saved]


def load_across_layouts(path: str | Path, objects: Mapping[str, Any], *, rng: bool = True,
                        strict: bool = True, verify: str = "full",
                        prepare: Callable[[Path], Any] | None = None,
                        manifest: Manifest | None = None,
                        trust_pickles: bool | None = None,
                        read_states: StateReader | None = None) -> LoadedCheckpoint:
    """Load a ``"sharded"`` or ``"replicated"`` checkpoint into ``objects`` prepared for the
    other layout (see the module docstring); call it on every rank.

    ``objects``: name -> model (a module, or a wrapper with ``checked_module()``),
    optimizer, or any object with ``load_state_dict``. Every byte is checked before
    anything is read (``verify`` is always ``"full"``); ``prepare(path)`` runs after the
    checks and may still fill ``objects`` (a dict). ``trust_pickles`` is not needed:
    neither layout unpickles code. ``read_states`` reads the models and optimizers of
    another layout (a strategy's own writer's), after the same checks; by default the
    registered writer's (:func:`full_state_reader`). A refused load changes nothing, nor
    does one that fails part-way on any rank: the models and optimizers are kept first (a
    CPU copy of this rank's tensors and optimizer state) and put back on every rank.
    """
    path = Path(path)
    rank, world, on = dist_info()
    manifest = verify_checkpoint(path, deep=False, manifest=manifest)
    if manifest.layout not in FULL_STATE_LAYOUTS and read_states is None:
        read_states = full_state_reader(manifest.layout)
    if manifest.layout not in FULL_STATE_LAYOUTS and read_states is None:
        raise CheckpointError(f"{path} is a {manifest.layout!r} checkpoint: only "
                              f"{' and '.join(FULL_STATE_LAYOUTS)} ones load across layouts "
                              "(or one whose states a reader is given for).")
    _agree(_check_share(path, manifest, rank, world), on)
    if prepare is not None:
        prepare(path)
    models, optimizers, rest = _split(objects, strict)
    modules = {n: m for n, (m, _) in models.items()}
    owners = {n: next(name for name, m in modules.items() if m is _owner(o, modules))
              for n, o in optimizers.items()}
    found, problem = _attempt(lambda: _read_everything(path, manifest, objects, rest, owners,
                                                       read_states, rank, rng, strict))
    _agree(problem, on)  # a file unreadable on one rank stops every rank before any change
    states, whole, rng_state, data = found
    named: dict[str, Any] = {}
    problems = []
    for name, optimizer in optimizers.items():
        if name not in states:
            continue
        owner = _owner(optimizer, modules)
        named[name] = _keyed_by_name(states[name], _param_names(owner, optimizer))
        issue = _optimizer_problem(owner, optimizer, named[name])
        if issue is not None:
            problems.append(f"{name}: {issue}")
    _refuse(path, problems)
    refuse_misfits(path, [(n, _Checked(*models[n]), states[n]) for n in models if n in states]
                   + [(n, rest[n], st) for n, st in whole.items()])
    with all_or_nothing() as rollback:  # a failure on any rank: every rank puts back
        agree_on(path, on, lambda: apply_states(
            path, [(n, rest[n], st) for n, st in whole.items()], rng_state))
        for obj in [m for n, (m, _) in models.items() if n in states] + [
                o for n, o in optimizers.items() if n in named]:
            rollback.keep(obj, copy=True)  # torch writes into their tensors in place
        agree_on(path, on, lambda: _put_in_place(models, optimizers, modules, states, named))
    return LoadedCheckpoint(path, manifest, data, manifest.step, None)


def _read_everything(path: Path, manifest: Manifest, objects: Mapping[str, Any],
                     rest: dict[str, Any], owners: dict[str, str],
                     read_states: StateReader | None, rank: int, rng: bool,
                     strict: bool) -> tuple[Any, ...]:
    """Everything this rank loads, read and checked before any object changes."""
    found = _read_states(path, manifest, _missing(path, manifest, list(objects), strict),
                         owners, read_states)
    states = {n: st for n, st in found.items() if n not in rest}
    whole = {n: st for n, st in found.items() if n in rest}
    rng_state = None
    if rng and rng_name(rank) in manifest.objects:
        rng_state = read_object(path, rng_name(rank), manifest)
    elif rng:
        warnings.warn(f"{path} holds no RNG state for rank {rank} (saved by "
                      f"{manifest.world_size} process(es)); this rank's random draws will "
                      "differ from the original run.", stacklevel=4)
    return states, whole, rng_state, _read_data(path, manifest)


def _refuse(path: Path, problems: list[str]) -> None:
    if problems:
        raise CheckpointError(
            f"{path} does not fit the objects it is loaded into, so nothing was loaded: "
            f"{' | '.join(problems)}. Prepare the same models and optimizers (same "
            "architecture, same parameter groups) as the run that saved it.")


def _put_in_place(models: dict[str, tuple[nn.Module, bool]], optimizers: dict[str, Any],
                  modules: dict[str, nn.Module], states: dict[str, Any],
                  named: dict[str, Any]) -> None:
    """Full states into the models (each rank keeps its shard) and their optimizers."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    for name, (module, strict) in models.items():
        if name in states:
            set_model_state_dict(module, states[name], options=StateDictOptions(
                full_state_dict=True, strict=strict))
    for name, optimizer in optimizers.items():
        if name in named:
            set_optimizer_state_dict(_owner(optimizer, modules), _inner(optimizer), named[name],
                                     options=StateDictOptions(full_state_dict=True))

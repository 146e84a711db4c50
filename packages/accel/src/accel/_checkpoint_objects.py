"""What goes into a checkpoint under which name, and Accelerate's functional layer.

The names (``model``, ``model_1``, ``optimizer``, ``scheduler``, ``dataloader``,
``scaler``, ``custom_checkpoint_<i>``) are shared by every checkpoint layout (replicated,
sharded, a strategy's own writer) and by Accelerate's ``save_accelerator_state`` /
``load_accelerator_state`` / ``save_custom_state`` / ``load_custom_state``, which
``accel.checkpointing`` re-exports.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.containment import inside
from accel_checkpoint.fileio import read_json, read_safetensors, write_json, write_safetensors
from accel_checkpoint.manager import PendingSave, load_checkpoint, save_checkpoint
from accel_checkpoint.manifest import read_manifest
from accel_checkpoint.tree import flatten_state, unflatten_state
from accel_state import PartialState
from accel_state.protocols import Stateful

__all__ = ["indexed", "shared_objects", "ModelSlot", "EpochStart", "LegacyPosition",
           "saved_dataloaders", "scaler_of", "save_accelerator_state", "load_accelerator_state",
           "save_custom_state", "load_custom_state", "weights_module"]


def indexed(base: str, i: int) -> str:
    return base if i == 0 else f"{base}_{i}"


def shared_objects(model_states: list[Any], optimizers: list[Any], schedulers: list[Any],
                    dataloaders: list[Any], scaler: Any = None,
                    custom: list[Any] | None = None) -> dict[str, Any]:
    """The name -> object (or state dict) map of a save; names match on load."""
    objects: dict[str, Any] = {}
    objects.update({indexed("model", i): s for i, s in enumerate(model_states)})
    objects.update({indexed("optimizer", i): o for i, o in enumerate(optimizers)})
    objects.update({indexed("scheduler", i): s for i, s in enumerate(schedulers)})
    objects.update({indexed("dataloader", i): d for i, d in enumerate(dataloaders)
                    if isinstance(d, Stateful)})
    if scaler is not None:
        objects["scaler"] = scaler
    objects.update({f"custom_checkpoint_{i}": o for i, o in enumerate(custom or [])})
    return objects


class ModelSlot:
    """Loads a state dict into the unwrapped model (DDP, compile wrappers stripped)."""

    def __init__(self, model: torch.nn.Module, strict: bool) -> None:
        self.model, self.strict = model, strict

    def checked_module(self) -> tuple[torch.nn.Module, bool]:
        """The unwrapped model and ``strict``, checked before anything is loaded."""
        from accel_parallel import extract_model_from_parallel

        return extract_model_from_parallel(self.model), self.strict

    def load_state_dict(self, state: dict[str, Any]) -> None:
        module, strict = self.checked_module()
        module.load_state_dict(state, strict=strict)


def save_accelerator_state(output_dir: str | os.PathLike[str], model_states: list[Any],
                           optimizers: list[Any], schedulers: list[Any], dataloaders: list[Any],
                           process_index: int, step: int, scaler: Any = None,
                           save_on_each_node: bool = False, safe_serialization: bool = True,
                           ) -> Path | None:
    """Save models' state dicts, optimizers, schedulers, dataloaders, scaler, step, RNG."""
    objects = shared_objects(model_states, optimizers, schedulers, dataloaders, scaler)
    result = save_checkpoint(output_dir, objects, data={"step": step}, step=step,
                             save_on_each_node=save_on_each_node)
    return result if not isinstance(result, PendingSave) else result.wait()


def load_accelerator_state(input_dir: str | os.PathLike[str], models: list[Any],
                           optimizers: list[Any], schedulers: list[Any], dataloaders: list[Any],
                           process_index: int, scaler: Any = None, map_location: Any = None,
                           **load_model_func_kwargs: Any) -> dict[str, Any]:
    """Inverse of :func:`save_accelerator_state`; returns ``{"step": ...}`` to apply."""
    strict = load_model_func_kwargs.get("strict", True)
    models = [ModelSlot(m, strict) for m in models]
    objects = shared_objects(models, optimizers, schedulers, [], scaler)
    objects.update(saved_dataloaders(input_dir, dataloaders, exact=False))
    loaded = load_checkpoint(input_dir, objects)
    data = loaded.data or {}
    return {"step": data.get("step", loaded.step or 0)}


def saved_dataloaders(path: str | os.PathLike[str], dataloaders: list[Any],
                      saved: dict[str, Any] | None = None, saved_world: int | None = None,
                      world: int | None = None, *, exact: bool = True) -> dict[str, Any]:
    """The prepared ``Stateful`` loaders whose position the checkpoint at ``path`` holds
    (``saved``: its manifest's objects, when already read); the others warn. Saved by
    ``saved_world`` processes and loaded by ``world``, a position from before world-size
    changes were re-dealt warns what it repeats or skips (:class:`LegacyPosition`).
    ``exact=False`` (Accelerate's ``load_state``): a loader that is not stateful
    (``use_stateful_dataloader``) gets its epoch back but starts it from its first batch
    (:class:`EpochStart`); the script skips what it has seen."""
    saved = saved if saved is not None else read_manifest(path).objects
    found: dict[str, Any] = {}
    for i, loader in enumerate(dataloaders):
        name = indexed("dataloader", i)
        if name in saved and isinstance(loader, Stateful) and not (
                exact or getattr(loader, "use_stateful_dataloader", False)):
            found[name] = EpochStart(loader)
        elif name in saved and isinstance(loader, Stateful):
            changed = saved_world is not None and world is not None and saved_world != world
            found[name] = LegacyPosition(loader, name, path, saved_world, world) if changed \
                else loader
        elif isinstance(loader, Stateful):
            warnings.warn(f"{path} has no position for dataloader {i}; it starts from the "
                          "beginning of its epoch.", stacklevel=3)
    return found


class EpochStart:
    """A prepared loader loaded as Accelerate loads one that is not stateful: its epoch and
    shuffle come back, its mid-epoch position does not (the next pass is that epoch from
    its first batch, so a script that skips the batches it has seen skips them once)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.loads_into = loader  # what a failed load puts back (accel_checkpoint.rollback)

    def state_dict(self) -> Any:
        return self.loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.loader.load_state_dict(state, position=False)


class LegacyPosition:
    """A prepared loader loaded from a checkpoint of another world size. Positions saved
    by accel-data 0.2.0 or older hold no ``source_batches`` (what all processes consumed),
    so they resume by the per-process count: say what that repeats or skips. Newer
    positions are re-dealt exactly by the loader itself."""

    def __init__(self, loader: Any, name: str, path: str | os.PathLike[str],
                 saved_world: int | None, world: int | None) -> None:
        self.loader, self.name, self.path = loader, name, path
        self.loads_into = loader  # what a failed load puts back (accel_checkpoint.rollback)
        self.saved_world, self.world = saved_world, world

    def state_dict(self) -> Any:
        return self.loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        done = state.get("batches_yielded") if isinstance(state, dict) else None
        if (isinstance(done, int) and done > 0 and "source_batches" not in state
                and self.saved_world and self.world):
            gap = abs(self.saved_world - self.world) * done
            fate = "seen twice" if self.saved_world > self.world else "skipped"
            warnings.warn(
                f"{self.path}: the position of {self.name} (epoch {state.get('epoch')}, "
                f"{done} batches per process) was saved by accel-data 0.2.0 or older with "
                f"{self.saved_world} process(es); it records no position for another world "
                f"size, so with {self.world} each process skips {done} of its batches and "
                f"about {gap} batches of that epoch are {fate}. Resume it with "
                f"{self.saved_world} process(es) to continue exactly (positions saved by "
                "newer versions resume exactly on any number of processes).", stacklevel=2)
        self.loader.load_state_dict(state)


def save_custom_state(obj: Any, path: str | os.PathLike[str], index: int = 0,
                      save_on_each_node: bool = False) -> None:
    """Write ``obj.state_dict()`` as ``custom_checkpoint_{index}.{safetensors,json}`` in
    ``path``."""
    state = PartialState()
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return
    skeleton, tensors = flatten_state(obj.state_dict())
    base = Path(path) / f"custom_checkpoint_{index}"
    write_safetensors(base.with_suffix(".safetensors"), tensors, hashed=False)  # manifest hashes it
    write_json(base.with_suffix(".json"), skeleton)


def load_custom_state(obj: Any, path: str | os.PathLike[str], index: int = 0) -> None:
    """Inverse of :func:`save_custom_state`. Inside an accel checkpoint (files written by a
    save hook into its staging directory are in its manifest) both files are verified."""
    base = Path(path) / f"custom_checkpoint_{index}"
    records = {}
    if (Path(path) / MANIFEST_NAME).is_file():
        records = read_manifest(path).files
    tensors, _ = read_safetensors(inside(path, f"{base.name}.safetensors", path),
                                  records.get(f"{base.name}.safetensors"))
    skeleton = read_json(inside(path, f"{base.name}.json", path), records.get(f"{base.name}.json"))
    obj.load_state_dict(unflatten_state(skeleton, tensors))


def weights_module(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """The module whose state dict checkpoints hold: the user's, without the strategy's
    wrappers nor torch.compile's (whose names carry an ``_orig_mod.`` prefix), so a
    checkpoint loads the same with or without compilation."""
    return accelerator.unwrap_model(model, keep_torch_compile=False)



def scaler_of(accelerator: Any) -> Any:
    """The accelerator's grad scaler when it has one with a state to save."""
    scaler = getattr(accelerator, "scaler", None)
    return scaler if isinstance(scaler, Stateful) else None

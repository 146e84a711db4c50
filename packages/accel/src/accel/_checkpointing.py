"""``Accelerator.save_state``/``load_state`` and friends, on top of accel-checkpoint.

A checkpoint holds: each prepared model (its unwrapped weights, ``model``, ``model_1``,
...), optimizers, schedulers, the grad scaler, the position of every prepared dataloader
that is ``Stateful`` (accel-data's are; found by duck typing, accel-data is never
imported), ``register_for_checkpointing`` objects, the step, and every rank's RNG states.

How it is laid out is the strategy's choice (``Strategy.checkpoint_format(models)``,
resolved by :mod:`accel._checkpoint_layouts`): ``"replicated"`` (rank 0 writes full state
dicts as safetensors + JSON), ``"sharded"`` (every rank writes its DCP shards), or a
``RankCheckpointWriter`` of the strategy's own. The functions here call the layout's
methods and never ask which one it is. :class:`CheckpointingMixin` gives the
Accelerator its methods; ``accel.checkpointing`` (Accelerate's module path) re-exports.
"""

from __future__ import annotations

import collections
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.accelerate_format import is_accelerate_checkpoint
from accel_checkpoint.coordination import sync_point
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.hashing import digest_algorithm
from accel_checkpoint.manager import (
    VERIFY_MODES,
    PendingSave,
    rotate_checkpoints,
    wait_for_pending_saves,
    wait_for_staging,
)
from accel_checkpoint.manifest import check_folder, latest_checkpoint, next_step, read_manifest
from accel_checkpoint.project import CHECKPOINT_PATTERN, ProjectConfiguration
from accel_checkpoint.weights import save_model_weights
from accel_state import env
from accel_state.errors import ConfigurationError

from accel._accelerate_checkpoints import load_accelerate_checkpoint
from accel._checkpoint_hooks import (
    hook_models,
    register_load_state_pre_hook,
    register_save_state_pre_hook,
    run_load_hooks,
)
from accel._checkpoint_layouts import checkpoint_layout, layout_loader
from accel._checkpoint_objects import saved_dataloaders, scaler_of, shared_objects

__all__ = ["init_checkpointing", "save_state", "load_state", "register_for_checkpointing",
           "register_save_state_pre_hook", "register_load_state_pre_hook", "save_model",
           "get_state_dict", "wait_for_checkpoint", "checkpoint_gate", "checkpoint_sync_point",
           "CheckpointingMixin"]

_AUTO_NAME = re.compile(r"checkpoint_(\d+)")


def init_checkpointing(accelerator: Any, project_dir: str | os.PathLike[str] | None,
                       project_config: ProjectConfiguration | None) -> None:
    """Called by ``Accelerator.__init__``: project configuration and hook registries."""
    config = project_config if project_config is not None else ProjectConfiguration()
    if not isinstance(config, ProjectConfiguration):
        raise ConfigurationError(f"project_config must be a ProjectConfiguration, got "
                                 f"{type(config).__name__}.")
    if project_dir is not None and config.project_dir is None:
        config.set_directories(project_dir)
    config.check_automatic_naming()
    accelerator.project_configuration = config
    accelerator._save_model_state_pre_hook = collections.OrderedDict()
    accelerator._load_model_state_pre_hook = collections.OrderedDict()
    accelerator._pending_checkpoint = None
    accelerator._checkpoint_verification = None


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


def _arm_gate(accelerator: Any) -> None:
    """Make every prepared optimizer run :func:`checkpoint_gate` before its next step."""
    for optimizer in accelerator._optimizers:
        optimizer._before_step = functools.partial(checkpoint_gate, accelerator)  # picklable


def _stable_tensors(accelerator: Any) -> list[torch.Tensor]:
    """Tensors only an optimizer step changes: the prepared optimizers' parameters and
    state. An async save copies them after returning (gated by the next step)."""
    found: list[torch.Tensor] = []
    for optimizer in accelerator._optimizers:
        found += [p for group in optimizer.param_groups for p in group["params"]]
        found += [t for s in optimizer.state.values() for t in s.values()
                  if isinstance(t, torch.Tensor)]
    return found


def _output_dir(accelerator: Any, output_dir: str | os.PathLike[str] | None) -> Path:
    config = accelerator.project_configuration
    if config.automatic_checkpoint_naming:
        target = config.checkpoints_dir / f"checkpoint_{config.iteration}"
        if target.exists():
            raise ConfigurationError(
                f"Checkpoint directory {target} ({config.iteration}) already exists. Call "
                "accelerator.load_state() first to resume (it continues the numbering), or set "
                "accelerator.project_configuration.iteration to the next free number.")
        return target
    if output_dir is None:
        raise ConfigurationError("save_state() needs output_dir, or "
                                 "ProjectConfiguration(automatic_checkpoint_naming=True).")
    return Path(output_dir)


def save_state(accelerator: Any, output_dir: str | os.PathLike[str] | None = None,
               safe_serialization: bool = True, async_save: bool = False,
               **save_model_func_kwargs: Any) -> str:
    """Save everything needed to resume bit for bit; return the checkpoint path.

    Call it on every process. accel's own files are safetensors + JSON
    (``safe_serialization`` is accepted for compatibility); a strategy's writer chooses its
    own (see docs/checkpoint.md, "Checkpoint layouts and writers"). Save pre-hooks get the staging directory as
    ``output_dir``: what they write there is committed (and listed in the manifest) with
    the rest; their ``weights`` are the full state dicts of a replicated layout (popping
    one leaves that model to the hook) and ``[]`` when every rank writes its own files.
    ``async_save=True`` returns once the state is taken and writes in the background; the
    optimizers' parameters and state are copied on that thread too, so the next
    ``optimizer.step()`` waits until that copy is done (layouts that write on every rank
    warn and save synchronously).
    """
    wait_for_checkpoint(accelerator)
    target = _output_dir(accelerator, output_dir)
    config = accelerator.project_configuration
    layout = checkpoint_layout(accelerator)
    entries, weights = layout.save_entries([_weights_module(accelerator, m)
                                            for m in accelerator._models])
    models_for_hooks = hook_models(accelerator)
    objects: dict[str, Any] = {}

    def prepare_dir(staging: Path) -> None:
        for hook in accelerator._save_model_state_pre_hook.values():
            hook(models_for_hooks, weights, str(staging))
        objects.update(shared_objects(entries, accelerator._optimizers,
                                      accelerator._schedulers, accelerator._dataloaders,
                                      scaler_of(accelerator), accelerator._custom_objects))

    with digest_algorithm(config.checkpoint_digest):
        result = layout.save(target, objects, data={"step": accelerator.step},
                             step=accelerator.step, async_save=async_save,
                             on_commit=_rotation(config), prepare_dir=prepare_dir,
                             save_on_each_node=config.save_on_each_node,
                             stable=_stable_tensors(accelerator) if async_save else ())
    if isinstance(result, PendingSave):
        accelerator._pending_checkpoint = result
        _arm_gate(accelerator)
    config.iteration += 1
    return str(target)


def _verify_mode(verify: str | None) -> str:
    mode = verify if verify is not None else (env.CHECKPOINT_VERIFY.get() or "full")
    if mode not in VERIFY_MODES:
        source = "verify=" if verify is not None else f"{env.CHECKPOINT_VERIFY.name}="
        raise ConfigurationError(f"{source}{mode!r} is not a checkpoint verification mode: use "
                                 f"{' or '.join(VERIFY_MODES)}.")
    return mode


def _input_dir(config: ProjectConfiguration, input_dir: str | os.PathLike[str] | None) -> Path:
    if input_dir is None:
        if not config.automatic_checkpoint_naming:
            raise ConfigurationError("load_state() needs input_dir, or "
                                     "ProjectConfiguration(automatic_checkpoint_naming=True).")
        input_dir = latest_checkpoint(config.checkpoints_dir, pattern=CHECKPOINT_PATTERN)
        if input_dir is None:
            raise CheckpointError(f"No complete checkpoint in {config.checkpoints_dir} to load.")
    return Path(input_dir)


def load_state(accelerator: Any, input_dir: str | os.PathLike[str] | None = None,
               load_kwargs: dict[str, Any] | None = None, verify: str | None = None, *,
               trust_pickles: bool | None = None, **load_model_func_kwargs: Any) -> None:
    """Restore a checkpoint written by :func:`save_state` (default: the newest complete one).

    ``verify``: ``"full"`` (default, or ``ACCEL_CHECKPOINT_VERIFY``) checks every byte
    before anything is loaded; ``"background"`` loads at once and checks while training
    starts — the first ``optimizer.step()`` (or save, or ``end_training``) waits for the
    check and raises ``CorruptCheckpointError`` naming the file if it failed. Layouts in
    which every rank writes its own files (sharded, FSDP2) are always checked in full
    first. ``trust_pickles``: load a layout whose writer unpickles arbitrary objects
    (default: ``ACCEL_CHECKPOINT_TRUST_PICKLES``; see docs/checkpoint.md). The checkpoint's
    layout is the one the strategy saves the prepared models in, or one that loads into it
    through full state dicts (a sharded FSDP2 checkpoint into DDP models and back, a
    DeepSpeed ZeRO-1/2 one into either, any world size; see docs/checkpoint.md, "Loading
    across layouts"). With automatic
    naming, later saves continue the numbering after the loaded checkpoint. A folder
    written by Hugging Face Accelerate's ``save_state`` loads too (docs/checkpoint.md).
    """
    mode = _verify_mode(verify)
    # A background check of an earlier load guards the state this load replaces: it is
    # set aside (its failure belongs to that load), and put back if this load is refused.
    earlier, accelerator._checkpoint_verification = accelerator._checkpoint_verification, None
    try:
        wait_for_checkpoint(accelerator)
        checkpoint_sync_point(accelerator, "load_state")
        input_dir = _input_dir(accelerator.project_configuration, input_dir)
        try:
            _load_state(accelerator, input_dir, mode, trust_pickles, load_model_func_kwargs)
        except CorruptCheckpointError as exc:  # say what to load instead
            hint = f"{exc.problem.rstrip('.')}. {next_step(input_dir)}"
            raise CorruptCheckpointError(exc.path, hint) from None
    except BaseException:
        if earlier is not None and accelerator._checkpoint_verification is None:
            accelerator._checkpoint_verification = earlier  # nothing changed: still guarded
            _arm_gate(accelerator)
        raise


def _load_state(accelerator: Any, input_dir: Path, mode: str, trust_pickles: bool | None,
                load_model_func_kwargs: dict[str, Any]) -> None:
    """:func:`load_state` on a chosen folder: Accelerate's (told by its files), else accel's
    (missing, staging, parked, partial or corrupt ones are refused, never downgraded)."""
    config = accelerator.project_configuration
    check_folder(input_dir)
    if is_accelerate_checkpoint(input_dir):  # a project switching from Accelerate
        load_accelerate_checkpoint(accelerator, input_dir,
                                   strict=load_model_func_kwargs.get("strict", True))
        return
    layout = checkpoint_layout(accelerator)
    manifest = read_manifest(input_dir)
    load = layout_loader(layout, manifest, input_dir)  # refuses a layout that cannot fit
    strict = load_model_func_kwargs.get("strict", True)
    objects: dict[str, Any] = {}

    def prepare(path: Path) -> None:
        entries = [layout.load_entry(_weights_module(accelerator, m), strict)
                   for m in run_load_hooks(accelerator, layout, path)]
        objects.update(shared_objects(entries, accelerator._optimizers,
                                      accelerator._schedulers, [], scaler_of(accelerator),
                                      accelerator._custom_objects))
        objects.update(saved_dataloaders(path, accelerator._dataloaders, manifest.objects,
                                         manifest.world_size, accelerator.num_processes,
                                         exact=accelerator._dataloader_config.exact_resume))

    loaded = load(input_dir, objects, verify=mode, prepare=prepare, manifest=manifest,
                         trust_pickles=trust_pickles)
    if loaded.verification is not None and mode == "background":
        accelerator._checkpoint_verification = loaded.verification
        _arm_gate(accelerator)
    accelerator.step = int((loaded.data or {}).get("step", loaded.step or 0))
    match = _AUTO_NAME.fullmatch(input_dir.name)
    if config.automatic_checkpoint_naming and match:  # later saves continue the numbering
        config.iteration = int(match.group(1)) + 1


def _rotation(config: ProjectConfiguration) -> Callable[[Path], None] | None:
    """The ``on_commit`` hook applying ``total_limit`` to automatically named checkpoints."""
    if not (config.automatic_checkpoint_naming and config.total_limit is not None):
        return None
    limit = config.total_limit

    def rotate(path: Path) -> None:
        rotate_checkpoints(path.parent, limit, CHECKPOINT_PATTERN, protect=path)
    return rotate


def register_for_checkpointing(accelerator: Any, *objects: Any) -> None:
    """Add objects (with ``state_dict``/``load_state_dict``) to every save and load.

    Checked as Accelerate checks (the attributes exist: proxies that forward them count), and
    refused as it refuses: a ``ValueError`` (here a ``ConfigurationError``) listing each."""
    bad = [(index, obj) for index, obj in enumerate(objects)
           if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))]
    if bad:
        items = "".join(f"\n\t- Item at index {index}, `{_pretty_name(obj)}`"
                        for index, obj in bad)
        raise ConfigurationError(
            "All `objects` must include a `state_dict` and `load_state_dict` function to be "
            f"stored. The following inputs are invalid:{items}\nGive each a state_dict() that "
            "returns its state and a load_state_dict(state) that restores it.")
    accelerator._custom_objects.extend(objects)


def _pretty_name(obj: Any) -> str:
    """A class's or function's own name, else its type's (as Accelerate names items)."""
    if not (hasattr(obj, "__qualname__") or hasattr(obj, "__name__")):
        obj = type(obj)
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))


def _weights_module(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """The module whose state dict checkpoints hold: the user's, without the strategy's
    wrappers nor torch.compile's (whose names carry an ``_orig_mod.`` prefix), so a
    checkpoint loads the same with or without compilation."""
    return accelerator.unwrap_model(model, keep_torch_compile=False)


def _full_state_dict(layout: Any, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layout's full state dict; for a model dispatched with CPU/disk offload (big-model
    hooks hold its weights, its parameters are meta) the weights the hooks hold."""
    from accel_inference.offload import get_state_dict_offloaded_model
    from accel_inference.tensors import has_offloaded_params

    if any(has_offloaded_params(sub) for sub in module.modules()):
        return get_state_dict_offloaded_model(module)
    return layout.full_state_dict(module)


def get_state_dict(accelerator: Any, model: torch.nn.Module, unwrap: bool = True
                   ) -> dict[str, torch.Tensor]:
    """The model's full state dict (of the unwrapped model by default).

    For a model whose checkpoint layout writes on every rank (FSDP2 / DTensor, an engine)
    it is a collective — call it on every process: the full tensors are gathered to CPU
    memory on the main process, the others get ``{}`` (as Accelerate's FSDP full state
    dict with ``rank0_only``)."""
    layout = checkpoint_layout(accelerator, [model])
    return _full_state_dict(layout, _weights_module(accelerator, model) if unwrap else model)


def save_model(accelerator: Any, model: torch.nn.Module, save_directory: str | os.PathLike[str],
               max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> None:
    """Write the unwrapped weights (main process, or each machine's with save_on_each_node
    when every rank holds them): one file or shards + index."""
    layout = checkpoint_layout(accelerator, [model])
    state_dict = _full_state_dict(layout, _weights_module(accelerator, model))
    each_node = (accelerator.project_configuration.save_on_each_node
                 and layout.full_state_on_every_rank)
    if accelerator.is_local_main_process if each_node else accelerator.is_main_process:
        save_model_weights(state_dict, save_directory, max_shard_size=max_shard_size,
                           safe_serialization=safe_serialization)


class CheckpointingMixin:
    """The Accelerator's checkpoint methods: thin delegations to the functions above."""

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        """Number of the next automatically named checkpoint."""
        return self.project_configuration.iteration

    def save_state(self, output_dir: Any = None, safe_serialization: bool = True,
                   **save_model_func_kwargs: Any) -> str:
        """Save models, optimizers, schedulers, dataloader positions, RNG states, ...

        Crash-safe and verified (see accel_checkpoint); ``async_save=True`` writes in the
        background. Call on every process.
        """
        return save_state(self, output_dir, safe_serialization, **save_model_func_kwargs)

    def load_state(self, input_dir: Any = None, load_kwargs: Any = None,
                   verify: str | None = None, *, trust_pickles: bool | None = None,
                   **load_model_func_kwargs: Any) -> None:
        """Restore a checkpoint (default: the newest complete one with automatic naming).

        ``verify="background"`` checks the bytes while training starts; ``trust_pickles``
        allows a layout whose files need a full unpickler (see docs/checkpoint.md).
        """
        load_state(self, input_dir, load_kwargs, verify, trust_pickles=trust_pickles,
                   **load_model_func_kwargs)

    def register_for_checkpointing(self, *objects: Any) -> None:
        register_for_checkpointing(self, *objects)

    def register_save_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        return register_save_state_pre_hook(self, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        return register_load_state_pre_hook(self, hook)

    def save_model(self, model: torch.nn.Module, save_directory: Any,
                   max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> None:
        save_model(self, model, save_directory, max_shard_size, safe_serialization)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        return get_state_dict(self, model, unwrap)

    def wait_for_checkpoint(self) -> None:
        """Block until an ``async_save`` is committed (``end_training`` does this too)."""
        wait_for_checkpoint(self)

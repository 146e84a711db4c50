"""``Accelerator.load_state``: which folder, which format, all or nothing.

The folder is the one given or the newest verified one; a folder written by Hugging Face
Accelerate loads through :mod:`accel._accelerate_checkpoints`, accel's own through the
layout the strategy saves in (:mod:`accel._checkpoint_layouts`). Every stage runs inside
one :func:`~accel_checkpoint.rollback.all_or_nothing`: files, keys, shapes and parameter
groups are checked before the first object changes, and what a later stage's failure
finds already changed (a scheduler, loader position, registered object, the RNG states,
optimizers, models a load hook filled) is put back before its error is raised
(docs/checkpoint.md, "A load changes everything or nothing").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from accel_checkpoint.accelerate_format import is_accelerate_checkpoint
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.manager import VERIFY_MODES
from accel_checkpoint.manifest import check_folder, latest_checkpoint, next_step, read_manifest
from accel_checkpoint.project import CHECKPOINT_PATTERN, ProjectConfiguration
from accel_checkpoint.rank_writers import dist_info
from accel_checkpoint.rollback import agree_on, all_or_nothing
from accel_state import env
from accel_state.errors import ConfigurationError

from accel._accelerate_checkpoints import load_accelerate_checkpoint
from accel._checkpoint_gate import arm_gate, checkpoint_sync_point, wait_for_checkpoint
from accel._checkpoint_hooks import run_load_hooks
from accel._checkpoint_layouts import checkpoint_layout, layout_loader
from accel._checkpoint_objects import saved_dataloaders, scaler_of, shared_objects, weights_module

__all__ = ["load_state"]

_AUTO_NAME = re.compile(r"checkpoint_(\d+)")


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
            arm_gate(accelerator)
        raise


def _load_state(accelerator: Any, input_dir: Path, mode: str, trust_pickles: bool | None,
                load_model_func_kwargs: dict[str, Any]) -> None:
    """:func:`load_state` on a chosen folder: Accelerate's (told by its files), else accel's
    (missing, staging, parked, partial or corrupt ones are refused, never downgraded).
    All or nothing: what a load that fails part-way had changed is put back."""
    check_folder(input_dir)
    strict = load_model_func_kwargs.get("strict", True)
    with all_or_nothing():  # a load that fails part-way puts back what it changed
        if is_accelerate_checkpoint(input_dir):  # a project switching from Accelerate
            agree_on(input_dir, dist_info()[2],  # no rank keeps what another could not load
                     lambda: load_accelerate_checkpoint(accelerator, input_dir, strict=strict))
        else:
            _load_accel_checkpoint(accelerator, input_dir, mode, trust_pickles, strict)


def _load_accel_checkpoint(accelerator: Any, input_dir: Path, mode: str,
                           trust_pickles: bool | None, strict: bool) -> None:
    """Load accel's own checkpoint at ``input_dir`` through the strategy's layout."""
    config = accelerator.project_configuration
    layout = checkpoint_layout(accelerator)
    manifest = read_manifest(input_dir)
    load = layout_loader(layout, manifest, input_dir)  # refuses a layout that cannot fit
    objects: dict[str, Any] = {}

    def prepare(path: Path) -> None:
        entries = [layout.load_entry(weights_module(accelerator, m), strict)
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
        arm_gate(accelerator)
    accelerator.step = int((loaded.data or {}).get("step", loaded.step or 0))
    match = _AUTO_NAME.fullmatch(input_dir.name)
    if config.automatic_checkpoint_naming and match:  # later saves continue the numbering
        config.iteration = int(match.group(1)) + 1

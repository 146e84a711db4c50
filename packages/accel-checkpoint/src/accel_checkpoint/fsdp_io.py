"""Accelerate's FSDP checkpoint helpers: ``save_fsdp_model`` / ``load_fsdp_model`` /
``save_fsdp_optimizer`` / ``load_fsdp_optimizer``, with Accelerate's signatures and files.

Hugging Face libraries (transformers' Trainer, peft) call these directly, outside
``save_state``, so they keep Accelerate's on-disk names: a full state dict is one
``pytorch_model_fsdp[_{i}].bin`` / ``optimizer[_{i}].bin`` written by rank 0; a sharded
one is a torch.distributed.checkpoint (DCP) directory ``pytorch_model_fsdp_{i}`` /
``optimizer_{i}`` that every rank writes its shards into. Model and optimizer state go
through ``torch.distributed.checkpoint.state_dict`` as in :mod:`accel_checkpoint.dcp_writer`
(the strategy's own sharded checkpoints), and reading never unpickles code: ``.bin`` files
with ``weights_only=True``, DCP metadata through :mod:`accel_checkpoint.dcp_io`.

With ``adapter_only=True`` (transformers' Trainer always passes it) a peft model saves and
loads only its active adapter, through peft's own state-dict functions; any other model is
saved whole, as in Accelerate.

``fsdp_plugin`` only needs ``state_dict_type`` (torch's ``StateDictType`` or its name) and
``accelerator`` only ``process_index``, ``num_processes`` and ``wait_for_everyone()``, so
this module depends on neither accel-parallel nor the facade. FSDP1's
``LOCAL_STATE_DICT`` does not exist under FSDP2 (accel's only FSDP) and is refused.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accel_checkpoint.constants import FSDP_MODEL_NAME, OPTIMIZER_NAME
from accel_checkpoint.errors import CheckpointError

__all__ = ["save_fsdp_model", "load_fsdp_model", "save_fsdp_optimizer", "load_fsdp_optimizer"]

_FULL, _SHARDED = "FULL_STATE_DICT", "SHARDED_STATE_DICT"


def _kind(fsdp_plugin: Any) -> str:
    """``"FULL_STATE_DICT"`` or ``"SHARDED_STATE_DICT"`` from the plugin's state_dict_type."""
    value = getattr(fsdp_plugin, "state_dict_type", None)
    name = str(getattr(value, "name", value)).rsplit(".", 1)[-1].upper()
    if name not in (_FULL, _SHARDED):
        raise CheckpointError(
            f"fsdp_plugin.state_dict_type={value!r} cannot be saved or loaded: use "
            f"'{_FULL}' (one file from rank 0) or '{_SHARDED}' (every rank its shards); "
            "LOCAL_STATE_DICT is FSDP1-only and accel runs FSDP2.")
    return name


def _indexed(stem: str, index: int, suffix: str = "") -> str:
    """Accelerate's file names: index 0 has no number (full files) — ``stem.bin``."""
    return f"{stem}{suffix}" if index == 0 else f"{stem}_{index}{suffix}"


def _options(full: bool, multi: bool, *, loading: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=full and multi,
                            broadcast_from_rank0=full and multi and loading)


def _dcp_save(state: dict[str, Any], directory: Path) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    directory.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # one process: DCP warns it runs without a group
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(directory),
                 no_dist=not dist.is_initialized())


def _dcp_load(state: dict[str, Any], directory: Path) -> None:
    """DCP-load into ``state`` in place, reading metadata and values without pickled code."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeLoadPlanner, VerifiedReader
    from accel_checkpoint.dcp_writer import describe_dcp_error

    if not (directory / DCP_METADATA_NAME).is_file():
        raise CheckpointError(f"{directory} is not a sharded FSDP checkpoint (no "
                              f"{DCP_METADATA_NAME}): save it with state_dict_type="
                              f"'{_SHARDED}', or load with '{_FULL}' if it holds a .bin file.")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        try:
            dcp.load(state, storage_reader=VerifiedReader(directory), planner=SafeLoadPlanner(),
                     no_dist=not dist.is_initialized())
        except CheckpointException as exc:
            raise CheckpointError(f"Could not load {directory}: {describe_dcp_error(exc)}"
                                  ) from exc


def _sharded_dir(base: str | os.PathLike[str], stem: str, index: int) -> Path:
    """Accelerate accepts the DCP directory itself as well as the folder that holds it."""
    path = Path(base)
    return path if stem in path.name else path / f"{stem}_{index}"


def _peft(model: nn.Module, adapter_only: bool) -> Any:
    """peft's module when only ``model``'s adapter is wanted (a model is a PeftModel only
    once peft is imported, so this never imports it), else None."""
    from accel_state.imports import is_peft_model

    return sys.modules["peft"] if adapter_only and is_peft_model(model) else None


def _model_state(model: nn.Module, adapter_only: bool, options: Any = None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    peft = _peft(model, adapter_only)
    if peft is not None:
        return peft.get_peft_model_state_dict(model, adapter_name=model.active_adapter)
    return get_model_state_dict(model, options=options)


def _read_full(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: it is written by save_fsdp_model / "
                              f"save_fsdp_optimizer with state_dict_type='{_FULL}'.")
    return torch.load(path, map_location="cpu", weights_only=True)


def save_fsdp_model(fsdp_plugin: Any, accelerator: Any, model: nn.Module,
                    output_dir: str | os.PathLike[str], model_index: int = 0,
                    adapter_only: bool = False) -> None:
    """Save ``model``'s weights under ``output_dir`` the way ``fsdp_plugin`` says (a
    collective: call it on every rank); ``adapter_only``: a peft model's adapter only."""
    kind, out = _kind(fsdp_plugin), Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    multi = accelerator.num_processes > 1
    state = _model_state(model, adapter_only, _options(kind == _FULL, multi, loading=False))
    if kind == _FULL:
        if accelerator.process_index == 0:
            torch.save(state, out / _indexed(FSDP_MODEL_NAME, model_index, ".bin"))
    else:
        _dcp_save({"model": state}, out / f"{FSDP_MODEL_NAME}_{model_index}")


def load_fsdp_model(fsdp_plugin: Any, accelerator: Any, model: nn.Module,
                    input_dir: str | os.PathLike[str], model_index: int = 0,
                    adapter_only: bool = False) -> Any:
    """Load what :func:`save_fsdp_model` wrote into ``model`` (a collective); returns
    torch's missing/unexpected keys. A full file is read by rank 0 and broadcast."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    accelerator.wait_for_everyone()
    kind, multi = _kind(fsdp_plugin), accelerator.num_processes > 1
    peft = _peft(model, adapter_only)
    if kind == _FULL:
        path = Path(input_dir) / _indexed(FSDP_MODEL_NAME, model_index, ".bin")
        rank0_only = multi and peft is None  # peft's loader has no broadcast: every rank reads
        state = _read_full(path) if accelerator.process_index == 0 or not rank0_only else {}
    else:
        holder = {"model": _model_state(model, adapter_only)}
        _dcp_load(holder, _sharded_dir(input_dir, FSDP_MODEL_NAME, model_index))
        state = holder["model"]
    if peft is not None:
        return peft.set_peft_model_state_dict(model, state, adapter_name=model.active_adapter)
    return set_model_state_dict(model, state, options=_options(kind == _FULL, multi, loading=True))


def save_fsdp_optimizer(fsdp_plugin: Any, accelerator: Any, optimizer: torch.optim.Optimizer,
                        model: nn.Module, output_dir: str | os.PathLike[str],
                        optimizer_index: int = 0) -> None:
    """Save ``optimizer``'s state (keyed by ``model``'s parameter names) under
    ``output_dir`` (a collective)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    kind, out = _kind(fsdp_plugin), Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    options = _options(kind == _FULL, accelerator.num_processes > 1, loading=False)
    state = get_optimizer_state_dict(model, _inner(optimizer), options=options)
    if kind == _FULL:
        if accelerator.process_index == 0:
            torch.save(state, out / _indexed(OPTIMIZER_NAME, optimizer_index, ".bin"))
    else:
        _dcp_save({"optimizer": state}, out / f"{OPTIMIZER_NAME}_{optimizer_index}")


def load_fsdp_optimizer(fsdp_plugin: Any, accelerator: Any, optimizer: torch.optim.Optimizer,
                        model: nn.Module, input_dir: str | os.PathLike[str],
                        optimizer_index: int = 0, adapter_only: bool = False) -> None:
    """Load what :func:`save_fsdp_optimizer` wrote into ``optimizer`` (a collective)."""
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    accelerator.wait_for_everyone()
    kind, multi = _kind(fsdp_plugin), accelerator.num_processes > 1
    inner = _inner(optimizer)
    if kind == _FULL:
        path = Path(input_dir) / _indexed(OPTIMIZER_NAME, optimizer_index, ".bin")
        state = _read_full(path) if accelerator.process_index == 0 or not multi else {}
    else:
        holder = {"optimizer": get_optimizer_state_dict(model, inner)}
        _dcp_load(holder, _sharded_dir(input_dir, OPTIMIZER_NAME, optimizer_index))
        state = holder["optimizer"]
    set_optimizer_state_dict(model, inner, state,
                             options=_options(kind == _FULL, multi, loading=True))


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer behind an ``AcceleratedOptimizer`` (torch's helpers check its type)."""
    return getattr(optimizer, "optimizer", optimizer)

"""The full states of a DeepSpeed checkpoint: for models and optimizers that are not engines,
and for engines on another number of processes (:mod:`~accel_parallel.deepspeed.reshape`).

``read_zero_checkpoint(folder)`` rebuilds, from one engine's checkpoint folder (a tag), the
model's full state dict — the fp32 master weights, the buffers — and the optimizer's state
keyed by parameter name (torch's ``get_optimizer_state_dict`` form), whatever number of
processes saved it:

- ZeRO-1/2 (``mp_rank_00_model_states.pt`` and one ``zero_pp_rank_<r>_..._optim_states.pt``
  per process): each process's flat partition is cut at the fragment offsets DeepSpeed
  records for it (``param_slice_mappings``) and each parameter's fragments are joined in
  rank order.
- ZeRO-3 (``zero_pp_rank_<r>_mp_rank_00_model_states.pt`` and ``..._optim_states.pt`` per
  process): every parameter is partitioned on its own, ``ceil(numel / world)`` values per
  process in the order of ``param_shapes`` (the last one padded); the slices are joined in
  rank order and the padding dropped.
- Stage 0 (no partitions): the torch optimizer's own state, as saved.

It also keeps what an engine restores beside them: the model file's counters and scheduler,
the optimizer wrapper's loss scaler. Files are read with
:func:`~accel_parallel.deepspeed.unpickle.restricted_load` (an allow-list of DeepSpeed's data
classes: no code runs), from the bytes the caller's ``read`` hash-checked when it gives one
(the facade does). Model parallelism, frozen parameters and DeepSpeed's elastic partition
format are refused, naming the way out (``accel merge-weights``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accel_state import ConfigurationError

__all__ = ["ZeroCheckpoint", "read_zero_checkpoint", "read_zero_full_states"]

_MODEL_FILE = "mp_rank_00_model_states.pt"
_OPTIM_FILE = re.compile(r"(?:^|_)zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$")
_ZERO3_MODEL_FILE = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_00_model_states\.pt$")
#: what a ZeRO optimizer keeps beside its partitions and restores with them
GLOBAL_KEYS = ("loss_scaler", "dynamic_loss_scale", "overflow", "clip_grad")


@dataclass
class ZeroCheckpoint:
    """One engine's DeepSpeed checkpoint, its partitions joined."""

    stage: int
    """the ZeRO stage that saved it (0: no partitions)"""
    processes: int
    """the number of processes whose partitions it holds (1 without partitions)"""
    weights: dict[str, torch.Tensor]
    """the full model state dict: fp32 master weights (partitioned stages), buffers"""
    optimizer: dict[str, Any] | None
    """the optimizer state keyed by parameter name (``None``: not saved)"""
    model_file: dict[str, Any]
    """the model states file (``global_steps``, ``lr_scheduler``, ... ) of rank 0"""
    optimizer_globals: dict[str, Any]
    """the ZeRO optimizer's loss scaler, overflow flag and clipping (rank 0's)"""


def _refuse(folder: Path, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{folder}: {why}, which accel cannot rebuild into full states (for models that "
        "are not DeepSpeed engines, or engines on another number of processes). Prepare the "
        "models with the same DeepSpeed configuration and number of processes to resume it, "
        f"or take its fp32 weights with `accel merge-weights {folder.parent.parent} OUT "
        "--trust_pickles` (the optimizer state then starts afresh).")


def _numbered(folder: Path, pattern: re.Pattern[str], what: str) -> list[Path]:
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := pattern.search(p.name))}
    if found and sorted(found) != list(range(len(found))):
        raise _refuse(folder, f"{what} of ranks {sorted(found)} (not 0..n-1)")
    return [found[r] for r in sorted(found)]


def _joined(folder: Path, name: str, pieces: list[torch.Tensor], shape: Any) -> torch.Tensor:
    whole = torch.cat(pieces) if len(pieces) > 1 else pieces[0].clone()
    if whole.numel() != math.prod(shape):
        raise _refuse(folder, f"fragments of {name} hold {whole.numel()} values for shape "
                      f"{tuple(shape)}")
    return whole.reshape(shape)


def _flat_and_scalars(base: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A flat partition's optimizer state: its flat tensors (the moments, as long as the
    padded partition), and the rest (``step``)."""
    flat = {k: v for k, v in base.items() if isinstance(v, torch.Tensor) and v.dim() == 1}
    return flat, {k: v for k, v in base.items() if k not in flat}


def _param_state(joined: dict[str, torch.Tensor], scalars: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in scalars.items()},
            **joined}


def _zero12_states(folder: Path, shapes: list[Any], parts: list[dict[str, Any]]
                   ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """fp32 weights and the name-keyed optimizer state out of ZeRO-1/2 partitions."""
    weights: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    for g, names in enumerate(shapes):
        pieces: dict[str, dict[str, list[torch.Tensor]]] = {n: {} for n in names}
        scalars: dict[str, Any] = {}
        for part in parts:
            fp32 = part["single_partition_of_fp32_groups"][g]
            base = part["base_optimizer_state"]["state"].get(g, {})
            flat, rest = _flat_and_scalars(base)
            scalars.update(rest)
            flat = {"fp32": fp32, **flat}
            for name, where in part["param_slice_mappings"][g].items():
                for key, tensor in flat.items():
                    piece = tensor.narrow(0, where.start, where.numel)
                    pieces[name].setdefault(key, []).append(piece)
        for name, shape in names.items():
            joined = {k: _joined(folder, f"{name} ({k})", v, shape)
                      for k, v in pieces[name].items()}
            weights[name] = joined.pop("fp32")
            state[name] = _param_state(joined, scalars)
        hyper = parts[0]["base_optimizer_state"]["param_groups"][g]
        groups.append({**{k: v for k, v in hyper.items() if k != "params"},
                       "params": list(names)})
    return weights, {"state": state, "param_groups": groups}


def _zero3_states(folder: Path, shapes: list[Any], parts: list[dict[str, Any]]
                  ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """fp32 weights and the name-keyed optimizer state out of ZeRO-3 partitions: in each
    group's flat partition every parameter takes ``ceil(numel / processes)`` values."""
    world = len(parts)
    weights: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    for g, names in enumerate(shapes):
        flats, scalars = [], {}
        for part in parts:
            fp32 = part["fp32_flat_groups"][g]
            base = part["optimizer_state_dict"]["state"].get(g, {})
            flat, rest = _flat_and_scalars(base)
            scalars.update(rest)
            flats.append({"fp32": fp32, **flat})
        layouts = [(f["fp32"].numel(), sorted(f)) for f in flats]
        if any(layout != layouts[0] for layout in layouts):
            raise _refuse(folder, f"ZeRO-3 partitions of group {g} that differ between "
                          f"processes (values and state per process: {layouts})")
        offset = 0
        for name, shape in names.items():
            numel = math.prod(shape)
            size = math.ceil(numel / world)
            joined = {key: _joined(folder, f"{name} ({key})", [torch.cat(
                [flat[key].narrow(0, offset, size) for flat in flats])[:numel]], shape)
                for key in flats[0]}
            offset += size
            weights[name] = joined.pop("fp32")
            state[name] = _param_state(joined, scalars)
        if offset != flats[0]["fp32"].numel():
            raise _refuse(folder, f"ZeRO-3 partitions of group {g} holding "
                          f"{flats[0]['fp32'].numel()} values per process where its "
                          f"parameters take {offset}")
        hyper = parts[0]["optimizer_state_dict"]["param_groups"][g]
        groups.append({**{k: v for k, v in hyper.items() if k != "params"},
                       "params": list(names)})
    return weights, {"state": state, "param_groups": groups}


def _model_file(folder: Path, read: Any) -> tuple[dict[str, Any], int]:
    """Rank 0's model states file, and the number of ZeRO-3 processes (0: not ZeRO-3)."""
    from accel_parallel.deepspeed.unpickle import restricted_load

    if any(p.name.startswith("mp_rank_") and p.name != _MODEL_FILE for p in folder.iterdir()):
        raise _refuse(folder, "a model-parallel checkpoint (several mp_rank_* files)")
    zero3 = _numbered(folder, _ZERO3_MODEL_FILE, "ZeRO-3 model states")
    path = folder / _MODEL_FILE if not zero3 else zero3[0]
    if not path.is_file():
        raise _refuse(folder, f"no {_MODEL_FILE} and no zero_pp_rank_0_mp_rank_00_model_states.pt")
    return restricted_load(path, map_location="cpu", read=read), len(zero3)


def read_zero_checkpoint(folder: str | Path, read: Any = None) -> ZeroCheckpoint:
    """One engine's DeepSpeed checkpoint folder, rebuilt (see the module docstring).
    ``read`` (``path -> bytes``, hash-checked: accel-checkpoint's ``verified_reader``):
    every file is unpickled from the bytes it returns, not opened again."""
    from accel_state.imports import require

    from accel_parallel.deepspeed.unpickle import restricted_load

    folder = Path(folder)
    require("deepspeed", extra="deepspeed", dist="accel-parallel",
            feature="reading DeepSpeed checkpoints")
    model, zero3 = _model_file(folder, read)
    module = {k: v for k, v in model["module"].items()
              if isinstance(v, torch.Tensor) and (not zero3 or k in model["buffer_names"])}
    files = _numbered(folder, _OPTIM_FILE, "ZeRO partitions")
    if not files:  # no ZeRO partitions: the torch optimizer's own state, by position
        if zero3:
            raise _refuse(folder, "ZeRO-3 model states without their optimizer partitions")
        return ZeroCheckpoint(0, 1, module, model.get("optimizer"), model, {})
    parts = [restricted_load(f, map_location="cpu", read=read)["optimizer_state_dict"]
             for f in files]
    stage = int(parts[0].get("zero_stage", 0))
    if zero3 and (stage != 3 or zero3 != len(parts)):
        raise _refuse(folder, f"{zero3} ZeRO-3 model states files beside {len(parts)} "
                      f"ZeRO-{stage} optimizer partitions")
    layout = ("fp32_flat_groups", "optimizer_state_dict") if stage == 3 else (
        "param_slice_mappings", "base_optimizer_state")
    if stage not in (1, 2, 3) or not all(
            isinstance(p.get(layout[1]), dict) and layout[0] in p for p in parts):
        raise _refuse(folder, f"ZeRO-{stage} partitions in a layout other than DeepSpeed's "
                      "ZeRO-1/2/3 rigid one (elastic, or a stage-0 bf16 optimizer's)")
    if model.get("frozen_param_shapes"):
        raise _refuse(folder, "frozen parameters partitioned apart from the trained ones")
    join = _zero3_states if stage == 3 else _zero12_states
    weights, optimizer = join(folder, model["param_shapes"], parts)
    globals_ = {k: parts[0][k] for k in GLOBAL_KEYS if k in parts[0]}
    return ZeroCheckpoint(stage, len(parts), {**module, **weights}, optimizer, model, globals_)


def read_zero_full_states(folder: str | Path, read: Any = None
                          ) -> tuple[dict[str, torch.Tensor], Any]:
    """``(model state dict, optimizer state)`` of one engine's DeepSpeed checkpoint folder
    (:func:`read_zero_checkpoint`); the optimizer state is ``None`` when none was saved."""
    saved = read_zero_checkpoint(folder, read)
    return saved.weights, saved.optimizer

"""The full states of a DeepSpeed checkpoint, for models and optimizers that are not engines.

``read_zero_full_states(folder)`` rebuilds, from one engine's checkpoint folder (a tag:
``mp_rank_00_model_states.pt`` and, under ZeRO-1/2, one ``zero_pp_rank_<r>_..._optim_states.pt``
per process that saved it), the model's full state dict — the fp32 master weights, the
buffers — and the optimizer's state keyed by parameter name (torch's
``get_optimizer_state_dict`` form): each process's flat ZeRO partition is cut at the
fragment offsets DeepSpeed records for it (``param_slice_mappings``) and the fragments of
each parameter are joined in rank order, whatever number of processes saved it. A
checkpoint without ZeRO partitions (stage 0) holds the torch optimizer's own state.

Files are read with :func:`~accel_parallel.deepspeed.checkpoint.restricted_load` (an
allow-list of DeepSpeed's data classes: no code runs), from the bytes the caller's
``read`` hash-checked when it gives one (the facade does). ZeRO-3 (every parameter partitioned
on its own), model parallelism and DeepSpeed's elastic partition format are refused,
naming the way out (``accel merge-weights``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import torch
from accel_state import ConfigurationError

__all__ = ["read_zero_full_states"]

_MODEL_FILE = "mp_rank_00_model_states.pt"
_OPTIM_FILE = re.compile(r"(?:^|_)zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$")


def _refuse(folder: Path, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{folder}: {why}, which accel cannot load into models that are not DeepSpeed "
        "engines. Prepare the models with the same DeepSpeed configuration to resume it, or "
        f"take its fp32 weights with `accel merge-weights {folder.parent.parent} OUT "
        "--trust_pickles` (the optimizer state then starts afresh).")


def _partition_files(folder: Path) -> list[Path]:
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := _OPTIM_FILE.search(p.name))}
    if found and sorted(found) != list(range(len(found))):
        raise _refuse(folder, f"ZeRO partitions of ranks {sorted(found)} (not 0..n-1)")
    return [found[r] for r in sorted(found)]


def _joined(folder: Path, name: str, pieces: list[torch.Tensor], shape: Any) -> torch.Tensor:
    whole = torch.cat(pieces) if len(pieces) > 1 else pieces[0].clone()
    if whole.numel() != math.prod(shape):
        raise _refuse(folder, f"fragments of {name} hold {whole.numel()} values for shape "
                      f"{tuple(shape)}")
    return whole.reshape(shape)


def _zero_states(folder: Path, shapes: list[Any], parts: list[dict[str, Any]]
                 ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """fp32 weights and the name-keyed optimizer state out of ZeRO-1/2 partitions."""
    weights: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    for g, names in enumerate(shapes):
        pieces: dict[str, dict[str, list[torch.Tensor]]] = {n: {} for n in names}
        scalars: dict[str, Any] = {}
        for part in parts:
            base = part["base_optimizer_state"]["state"].get(g, {})
            flat = {"fp32": part["single_partition_of_fp32_groups"][g]}
            flat.update({k: v for k, v in base.items()
                         if isinstance(v, torch.Tensor) and v.dim() == 1})
            scalars.update({k: v for k, v in base.items() if k not in flat})
            for name, where in part["param_slice_mappings"][g].items():
                for key, tensor in flat.items():
                    piece = tensor.narrow(0, where.start, where.numel)
                    pieces[name].setdefault(key, []).append(piece)
        for name, shape in names.items():
            joined = {k: _joined(folder, f"{name} ({k})", v, shape)
                      for k, v in pieces[name].items()}
            weights[name] = joined.pop("fp32")
            state[name] = {**{k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in scalars.items()}, **joined}
        hyper = parts[0]["base_optimizer_state"]["param_groups"][g]
        groups.append({**{k: v for k, v in hyper.items() if k != "params"},
                       "params": list(names)})
    return weights, {"state": state, "param_groups": groups}


def read_zero_full_states(folder: str | Path, read: Any = None
                          ) -> tuple[dict[str, torch.Tensor], Any]:
    """``(model state dict, optimizer state)`` of one engine's DeepSpeed checkpoint folder
    (see the module docstring); the optimizer state is ``None`` when none was saved.
    ``read`` (``path -> bytes``, hash-checked: accel-checkpoint's ``verified_reader``):
    every file is unpickled from the bytes it returns, not opened again."""
    from accel_state.imports import require

    from accel_parallel.deepspeed.unpickle import restricted_load

    folder = Path(folder)
    require("deepspeed", extra="deepspeed", dist="accel-parallel",
            feature="reading DeepSpeed checkpoints")
    if any(p.name.startswith("mp_rank_") and p.name != _MODEL_FILE for p in folder.iterdir()):
        raise _refuse(folder, "a model-parallel checkpoint (several mp_rank_* files)")
    if not (folder / _MODEL_FILE).is_file():
        raise _refuse(folder, f"no {_MODEL_FILE} (a ZeRO-3 checkpoint partitions the "
                      "parameters themselves)")
    model = restricted_load(folder / _MODEL_FILE, map_location="cpu", read=read)
    module = {k: v for k, v in model["module"].items() if isinstance(v, torch.Tensor)}
    files = _partition_files(folder)
    if not files:  # no ZeRO partitions: the torch optimizer's own state, by position
        return module, model.get("optimizer")
    parts = [restricted_load(f, map_location="cpu", read=read)["optimizer_state_dict"]
             for f in files]
    stage = int(parts[0].get("zero_stage", 0))
    if stage not in (1, 2) or not all(isinstance(p.get("base_optimizer_state"), dict)
                                      and "param_slice_mappings" in p for p in parts):
        raise _refuse(folder, f"ZeRO-{stage} partitions in a layout other than ZeRO-1/2's "
                      "(elastic or per-parameter)")
    if model.get("frozen_param_shapes"):
        raise _refuse(folder, "frozen parameters partitioned apart from the trained ones")
    weights, optimizer = _zero_states(folder, model["param_shapes"], parts)
    return {**module, **weights}, optimizer

"""Load checkpoints into (empty) models, tensor by tensor, onto the devices of a device map.

Files are found and ``.bin`` files read by accel-checkpoint (``weights_only=True``);
safetensors files are opened per device and read one tensor at a time straight to its
target device and dtype, so a checkpoint never needs a full copy in CPU memory. Tensors
mapped to ``"disk"`` go to the offload folder (``index.json`` + ``.dat``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accel_checkpoint.weights import checkpoint_files, load_state_dict_file
from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference.device_map import _check_coverage, validate_device_map
from accel_inference.offload import (
    load_offloaded_weights,
    offload_weight,
    save_offload_index,
)
from accel_inference.sizing import convert_dtype
from accel_inference.tensors import get_module_and_name, set_module_tensor_to_device
from accel_inference.tied import device_of, find_tied_parameters, retie_parameters

__all__ = ["load_state_dict", "load_checkpoint_in_model", "CheckpointMismatchError"]

logger = logging.getLogger("accel.big_modeling")


def _device_key(device: Any) -> str:
    if device == "disk":
        return "cpu"
    if isinstance(device, int):
        return f"cuda:{device}" if torch.cuda.is_available() else "cpu"
    return str(device)


def load_state_dict(checkpoint_file: str | os.PathLike[str],
                    device_map: Mapping[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """Tensors of one weights file; with ``device_map``, each read onto its mapped device."""
    return dict(_iter_file(Path(checkpoint_file), device_map))


def _iter_file(path: Path, device_map: Mapping[str, Any] | None
               ) -> Iterator[tuple[str, torch.Tensor]]:
    if path.suffix != ".safetensors":
        yield from load_state_dict_file(path).items()
        return
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        names = list(handle.keys())
        fmt = (handle.metadata() or {}).get("format", "pt")
    if fmt not in ("pt", "np", "flax", "tf", "mlx"):
        raise ConfigurationError(f"{path} has format {fmt!r} in its metadata; accel reads "
                                 "PyTorch safetensors ('pt').")
    groups: dict[str, list[str]] = {}
    for name in names:
        device = "cpu" if device_map is None else _device_key(_mapped(name, device_map))
        groups.setdefault(device, []).append(name)
    for device, group in groups.items():
        with safe_open(str(path), framework="pt", device=device) as handle:
            for name in group:
                yield name, handle.get_tensor(name)


def _mapped(name: str, device_map: Mapping[str, Any]) -> Any:
    try:
        return device_of(name, device_map)
    except KeyError:
        return "cpu"


def load_checkpoint_in_model(model: nn.Module, checkpoint: str | os.PathLike[str],
                             device_map: Mapping[str, Any] | None = None,
                             offload_folder: str | os.PathLike[str] | None = None,
                             dtype: Any = None, offload_state_dict: bool = False,
                             offload_buffers: bool = False,
                             keep_in_fp32_modules: Sequence[str] | None = None,
                             offload_8bit_bnb: bool = False, strict: bool = False,
                             full_state_dict: bool = True,
                             broadcast_from_rank0: bool = False) -> None:
    """Load a checkpoint (a file, a folder, or a sharded ``*.index.json``) into ``model``.

    Works on models built with ``init_empty_weights``: each tensor is materialised on the
    device ``device_map`` gives it (CPU without a map), cast to ``dtype`` for floating
    tensors (float32 in ``keep_in_fp32_modules``), or written to ``offload_folder`` when
    mapped to ``"disk"``. ``offload_state_dict`` parks CPU-mapped weights on disk while
    loading to keep peak RAM low. Without a map, materialised tensors take the values in
    place (as Accelerate's ``load_state_dict``). Unexpected names are skipped with
    Accelerate's warning; with ``strict`` any name mismatch raises
    ``CheckpointMismatchError`` (a ``RuntimeError``). Tensors left on ``meta`` are an error
    (the model could not run). ``broadcast_from_rank0`` and ``full_state_dict=False``
    (sharded loading) are not supported here: load the full state dict on every rank.
    """
    if broadcast_from_rank0 or not full_state_dict:
        raise ConfigurationError("load_checkpoint_in_model(broadcast_from_rank0=True / "
                                 "full_state_dict=False) is not supported: load the full "
                                 "checkpoint on every process, or use Accelerator.load_state.")
    if offload_8bit_bnb:
        raise ConfigurationError("offload_8bit_bnb=True needs bitsandbytes quantisation, "
                                 "which accel does not support: load without it.")
    dtype = convert_dtype(dtype)
    if device_map is not None:
        device_map = validate_device_map(device_map)
        _check_coverage(model, device_map)  # Accelerate's loader does not warn on keys
        if "disk" in device_map.values() and offload_folder is None:
            raise ConfigurationError("The device_map puts weights on 'disk': pass "
                                     "offload_folder= (a directory to write them to).")
    if offload_folder is not None:
        os.makedirs(offload_folder, exist_ok=True)
    files = checkpoint_files(Path(checkpoint))
    tied = find_tied_parameters(model)
    keep = tuple(keep_in_fp32_modules or ())
    buffers = {n for n, _ in model.named_buffers()}
    expected = {*model.state_dict()} | {n for n, _ in model.named_parameters()}
    offload_index: dict[str, Any] = {}
    parked: dict[str, Any] = {}
    parking = tempfile.mkdtemp(prefix="accel-offload-") if offload_state_dict else None
    found: set[str] = set()
    unexpected: list[str] = []
    try:
        for file in files:
            for name, value in _iter_file(file, device_map):
                if name not in expected:
                    unexpected.append(name)
                    continue
                found.add(name)
                target_dtype = None
                if dtype is not None and value.is_floating_point():
                    target_dtype = torch.float32 if any(
                        name == m or name.startswith(m + ".") or f".{m}." in f".{name}"
                        for m in keep) else dtype
                if device_map is None and _copy_in_place(model, name, value, target_dtype):
                    continue
                device = "cpu" if device_map is None else _mapped(name, device_map)
                if device == "disk":
                    if offload_buffers or name not in buffers:
                        if target_dtype is not None:
                            value = value.to(target_dtype)
                        offload_weight(value, name, offload_folder, index=offload_index)
                        continue
                    device = "cpu"
                if device == "cpu" and parking is not None:
                    if target_dtype is not None:
                        value = value.to(target_dtype)
                        # the parked weight comes back in the model's dtype: make it this one
                        set_module_tensor_to_device(model, name, "meta", dtype=target_dtype)
                    offload_weight(value, name, parking, index=parked)
                    continue
                set_module_tensor_to_device(model, name, _device_key(device) if
                                            isinstance(device, int) else device,
                                            value=value, dtype=target_dtype)
        if offload_folder is not None:
            save_offload_index(offload_index, offload_folder)
        if parking is not None:
            load_offloaded_weights(model, parked, parking)
    finally:
        if parking is not None:
            shutil.rmtree(parking, ignore_errors=True)
    retie_parameters(model, tied)
    _report(model, checkpoint, expected, found, unexpected, tied, strict)


def _copy_in_place(model: nn.Module, name: str, value: torch.Tensor, dtype: Any) -> bool:
    """Without a device map a materialised tensor takes the values where it is (Accelerate
    loads through ``load_state_dict`` there): same object on the same device, so an optimizer
    made before loading still holds the model's parameters."""
    owner, local = get_module_and_name(model, name)
    old = owner._parameters[local] if local in owner._parameters else owner._buffers.get(local)
    if old is None or old.device.type == "meta" or old.shape != value.shape or \
            (dtype is not None and dtype != old.dtype):
        return False
    with torch.no_grad():
        old.copy_(value)
    return True


class CheckpointMismatchError(ConfigurationError, RuntimeError):
    """``strict=True`` and the names differ: a ``RuntimeError`` as torch's
    ``load_state_dict`` raises in Accelerate, and a ``ValueError`` as accel's others."""


def _report(model: nn.Module, checkpoint: Any, expected: set[str], found: set[str],
            unexpected: list[str], tied: list[list[str]], strict: bool) -> None:
    """Missing/unexpected names: errors when strict or when a tensor is left on meta;
    unexpected ones otherwise warn with Accelerate's text (they were not loaded)."""
    tied_found = {n for group in tied if found & set(group) for n in group}
    missing = sorted(expected - found - tied_found)
    state = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    on_meta = [n for n in missing if n in state and state[n].device.type == "meta"]
    if strict and (missing or unexpected):
        raise CheckpointMismatchError(
            f"Error(s) in loading state_dict for {type(model).__name__} from {str(checkpoint)!r}"
            f": missing key(s) {missing[:10]}, unexpected key(s) {sorted(unexpected)[:10]}. "
            "Pass strict=False to load the matching names only.")
    if on_meta:
        raise ConfigurationError(f"The checkpoint {str(checkpoint)!r} lacks {on_meta[:10]}"
                                 f"{' (and more)' if len(on_meta) > 10 else ''}, left on the "
                                 "meta device: check that it belongs to this model.")
    if unexpected:
        names = "{" + ", ".join(repr(n) for n in sorted(set(unexpected))) + "}"
        logger.warning(
            f"Some weights of the model checkpoint at {checkpoint} were not used when "
            f"initializing {type(model).__name__}: {names}. This may or may not be an issue - "
            "make sure that the checkpoint does not have unnecessary parameters, or that the "
            "model definition correctly corresponds to the checkpoint.")
    if missing:
        logger.warning("The checkpoint at %s has no weights for %s of %s: they keep their "
                       "current values.", checkpoint, missing[:10], type(model).__name__)

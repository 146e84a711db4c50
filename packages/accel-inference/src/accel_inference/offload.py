"""Offload storage: one ``<name>.dat`` memory map per tensor plus ``index.json`` in a folder.

The ``.dat`` files are raw arrays (numpy memmaps); ``index.json`` records each tensor's dtype
and shape (bfloat16 is stored as int16 and viewed back). ``OffloadedWeightsLoader`` is a
read-only mapping over weights kept in RAM, in such a folder, or in safetensors files, read
one tensor at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accel_state.errors import ConfigurationError
from torch import nn

__all__ = ["offload_weight", "load_offloaded_weight", "save_offload_index", "offload_state_dict",
           "OffloadedWeightsLoader", "PrefixedDataset", "extract_submodules_state_dict",
           "load_offloaded_weights", "read_offload_index", "get_state_dict_from_offload",
           "get_state_dict_offloaded_model"]

INDEX_NAME = "index.json"

#: dtypes numpy lacks -> the integer type of the same width their bytes are stored as
_CARRIERS: dict[str, torch.dtype] = {"bfloat16": torch.int16, **{
    name: torch.int8 for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                  "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(torch, name)}}


def offload_weight(weight: torch.Tensor, weight_name: str, offload_folder: str | os.PathLike[str],
                   index: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Write ``weight`` to ``offload_folder/<weight_name>.dat``; record it in ``index``.

    numpy has no bfloat16 nor fp8: those are stored as same-width integers and the index
    keeps the real dtype's name, which :func:`load_offloaded_weight` views back."""
    dtype = None
    weight = weight.detach()
    carrier = _CARRIERS.get(str(weight.dtype).removeprefix("torch."))
    if carrier is not None:
        weight, dtype = weight.view(carrier), str(weight.dtype).removeprefix("torch.")
    array = weight.cpu().numpy()
    if index is not None:
        index[weight_name] = {"dtype": dtype or str(array.dtype), "shape": list(array.shape)}
    if array.ndim == 0:
        array = array[None]
    target = np.memmap(os.path.join(offload_folder, f"{weight_name}.dat"), dtype=array.dtype,
                       mode="w+", shape=array.shape)
    target[:] = array[:]
    target.flush()
    return index


def load_offloaded_weight(weight_file: str | os.PathLike[str], weight_info: Mapping[str, Any]
                          ) -> torch.Tensor:
    """Read one ``.dat`` file back as a tensor (a copy: the memmap is closed after)."""
    shape = tuple(weight_info["shape"]) or (1,)
    dtype = weight_info["dtype"]
    carrier = _CARRIERS.get(dtype)
    stored = str(carrier).removeprefix("torch.") if carrier is not None else dtype
    array = np.memmap(weight_file, dtype=stored, shape=shape, mode="r")
    if not weight_info["shape"]:
        array = array[0]
    tensor = torch.from_numpy(np.array(array, copy=True))
    return tensor.view(getattr(torch, dtype)) if carrier is not None else tensor


def save_offload_index(index: Mapping[str, Any], offload_folder: str | os.PathLike[str]) -> None:
    """Write (or extend) ``offload_folder/index.json``."""
    if not index:
        return
    path = Path(offload_folder) / INDEX_NAME
    current = json.loads(path.read_text()) if path.is_file() else {}
    current.update(index)
    path.write_text(json.dumps(current, indent=2))


def read_offload_index(offload_folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``index.json`` of an offload folder; a folder without one is an error naming it."""
    path = Path(offload_folder) / INDEX_NAME
    if not path.is_file():
        raise ConfigurationError(f"The offload folder {str(offload_folder)!r} has no {INDEX_NAME}: "
                                 "it was not written by offload_state_dict/disk_offload, or is "
                                 "incomplete. Point to the right folder or offload again.")
    return json.loads(path.read_text())


def offload_state_dict(save_dir: str | os.PathLike[str],
                       state_dict: Mapping[str, torch.Tensor]) -> None:
    """Offload every tensor of ``state_dict`` into ``save_dir`` (created if needed)."""
    os.makedirs(save_dir, exist_ok=True)
    index: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index=index)
    save_offload_index(index, save_dir)


class PrefixedDataset(Mapping):
    """A view of ``dataset`` with ``prefix`` added to every key (one module's weights)."""

    def __init__(self, dataset: Mapping[str, Any], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def __iter__(self) -> Iterator[str]:
        return (k[len(self.prefix):] for k in self.dataset if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class OffloadedWeightsLoader(Mapping):
    """Weights from RAM (``state_dict``), an offload folder, or safetensors files, by name.

    Index entries with ``safetensors_file`` are read from that file (one tensor, straight to
    ``device``); the others from ``save_folder/<name>.dat``.
    """

    def __init__(self, state_dict: Mapping[str, torch.Tensor] | None = None,
                 save_folder: str | os.PathLike[str] | None = None,
                 index: Mapping[str, Any] | None = None, device: Any = None) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise ConfigurationError("OffloadedWeightsLoader needs a state_dict, a save_folder "
                                     "or an index.")
        self.state_dict = dict(state_dict or {})
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            index = read_offload_index(save_folder)
        self.index = dict(index or {})
        self.all_keys = [*self.state_dict, *(k for k in self.index if k not in self.state_dict)]
        self.device = device

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        info = self.index[key]
        if info.get("safetensors_file") is not None:
            from safetensors import safe_open

            device = "cpu" if self.device is None else self.device
            with safe_open(info["safetensors_file"], framework="pt", device=str(device)) as f:
                tensor = f.get_tensor(info.get("weight_name", key))
            if "dtype" in info:
                tensor = tensor.to(getattr(torch, info["dtype"]))
            return tensor
        if self.save_folder is None:
            raise ConfigurationError(f"{key!r} is offloaded to disk but no save_folder was "
                                     "given to OffloadedWeightsLoader.")
        return load_offloaded_weight(os.path.join(self.save_folder, f"{key}.dat"), info)

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)


def extract_submodules_state_dict(state_dict: Mapping[str, torch.Tensor],
                                  submodule_names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` that belong to the named submodules."""
    from accel_inference.tensors import holds

    names = list(submodule_names)
    return {k: v for k, v in state_dict.items() if any(holds(n, k) for n in names)}


def load_offloaded_weights(model: nn.Module, index: Mapping[str, Any],
                           offload_folder: str | os.PathLike[str]) -> None:
    """Put every tensor of an offload folder back into ``model``, on the CPU."""
    from accel_inference.tensors import set_module_tensor_to_device

    for name, info in index.items():
        if "SCB" in name:
            continue
        weight = load_offloaded_weight(os.path.join(offload_folder, f"{name}.dat"), info)
        set_module_tensor_to_device(model, name, "cpu", value=weight)


def get_state_dict_from_offload(module: nn.Module, module_name: str,
                                state_dict: dict[str, Any],
                                device_to_put_offload: Any = "cpu") -> dict[str, Any]:
    """Fill ``state_dict`` with the real tensors of an offloaded ``module``.

    ``module_name`` is the full name of one of its tensors (``"layers.0.fc.weight"``): its
    parent prefix (``"layers.0.fc"``) names ``module`` in ``state_dict``. Inside
    :func:`~accel_inference.tensors.align_module_device` the hook's weights are brought to
    ``device_to_put_offload``; each of the module's own entries already present in
    ``state_dict`` (the meta placeholders of a saving loop) is replaced by that tensor.
    Entries absent from ``state_dict`` are not added. Returns ``state_dict``.
    """
    from accel_inference.tensors import align_module_device

    root = module_name.rpartition(".")[0]
    with align_module_device(module, device_to_put_offload):
        for key, tensor in module.state_dict().items():
            full = f"{root}.{key}" if root else key
            if full in state_dict:
                state_dict[full] = tensor
    return state_dict


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict of a model dispatched with CPU or disk offload, on the CPU.

    ``model.state_dict()`` of such a model holds meta placeholders where a hook keeps the
    real weights; each offloaded module's weights are brought in one module at a time (so
    peak memory stays one module above the result) and copied out before the hook drops
    them again. The keys and their order are ``model.state_dict()``'s.
    """
    from accel_inference.tensors import align_module_device, has_offloaded_params

    state_dict = {key: tensor.detach() for key, tensor in model.state_dict().items()}
    done: list[str] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if not has_offloaded_params(module) or any(prefix.startswith(d) for d in done):
            continue
        with align_module_device(module, "cpu"):  # a hook placing submodules fills them too
            for key, tensor in module.state_dict().items():
                if prefix + key in state_dict:
                    state_dict[prefix + key] = tensor.detach().to("cpu", copy=True)
        done.append(prefix)
    return {key: tensor.cpu() for key, tensor in state_dict.items()}

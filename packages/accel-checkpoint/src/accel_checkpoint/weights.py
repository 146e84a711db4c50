"""Model weights in the Hugging Face layout: ``model.safetensors`` or shards + index.

``save_model_weights`` de-duplicates tied weights (safetensors refuses aliased tensors;
the model re-ties them on load), splits by ``max_shard_size`` and writes each file
atomically (temporary name, fsync, rename). ``load_model_weights`` reads a file, a
folder or an index into a built model (accel-inference's ``load_checkpoint_in_model``
adds device maps, empty models and offload on top of ``checkpoint_files``). ``.bin`` files
are read with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from accel_state.enums import CustomDtype
from accel_state.errors import ConfigurationError

from accel_checkpoint.constants import (
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    SAFE_WEIGHTS_PATTERN_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    WEIGHTS_PATTERN_NAME,
)
from accel_checkpoint.containment import inside
from accel_checkpoint.durability import BackgroundFlusher, fsync_dir, fsync_file
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.fileio import write_safetensors


__all__ = ["save_model_weights", "load_model_weights", "checkpoint_files",
           "clean_state_dict_for_safetensors", "id_tensor_storage", "convert_file_size_to_int",
           "dtype_byte_size", "convert_bytes", "save", "load", "load_state_dict_file"]

_log = logging.getLogger(__name__)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def convert_file_size_to_int(size: int | str) -> int:
    """``"5GB"`` -> 5_000_000_000, ``"5GiB"`` -> 5 * 2**30; ints pass through."""
    if isinstance(size, int):
        return size
    match = _SIZE.match(str(size))
    if match is None:
        raise ConfigurationError(f"Cannot read the size {size!r}: use an int of bytes or a "
                                 "string such as '10GB', '500MB' or '2GiB'.")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


_CUSTOM_DTYPE_BYTES = {CustomDtype.FP8: 1.0, CustomDtype.INT4: 0.5, CustomDtype.INT2: 0.25}


def dtype_byte_size(dtype: torch.dtype | CustomDtype) -> float:
    """Bytes per element of ``dtype`` (fractions for sub-byte types such as int4)."""
    if isinstance(dtype, CustomDtype):
        return _CUSTOM_DTYPE_BYTES[dtype]
    if dtype == torch.bool:
        return 1 / 8
    bits = re.search(r"[^\d](\d+)_?", str(dtype))
    if bits is None:
        raise ConfigurationError(f"{dtype} is not a valid dtype: pass a torch.dtype such as "
                                 "torch.float16.")
    return int(bits.group(1)) / 8


def convert_bytes(size: float) -> str:
    """Human-readable size, e.g. ``1.5 GB``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{round(size, 2)} {unit}"
        size /= 1024
    return f"{size} TB"  # pragma: no cover


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """Identifies the memory a tensor lives in: tensors sharing it are tied."""
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def clean_state_dict_for_safetensors(state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Drop all but the first name of tensors sharing memory, and make the rest contiguous.

    safetensors stores no aliasing: each dropped name is logged (a ``WARNING`` of this
    module's logger, as Accelerate logs it); the model re-ties them when loaded."""
    seen: dict[tuple[Any, ...], str] = {}
    cleaned: dict[str, Any] = {}
    removed = []
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            cleaned[name] = tensor
            continue
        key = id_tensor_storage(tensor) if tensor.device.type != "meta" else (name,)
        if key in seen and tensor.numel() > 0:
            removed.append(f"{name} (tied to {seen[key]})")
            continue
        seen.setdefault(key, name)
        cleaned[name] = tensor.contiguous()
    if removed:
        _log.warning("Removed shared tensor(s) while saving: %s. The model re-ties them when "
                     "loaded.", ", ".join(removed))
    return cleaned


def _shards(state_dict: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _atomic_write(target: Path, write: Any) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def _torch_save_file(obj: Any, path: Path, fsync: bool = True) -> None:
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())


def _write_shards(directory: Path, names: list[str], shards: list[dict[str, torch.Tensor]],
                  safe_serialization: bool) -> list[Path]:
    """Write each shard to a temporary name, then fsync and rename it into place on a
    second thread while the next shard is written: the disk flushes one shard while the
    next is copied into the page cache (one after the other, it would sit idle in between).
    Every file appears whole or not at all; on an error no temporary file is left."""
    temporary = [directory / f".{name}.tmp-{os.getpid()}" for name in names]
    try:
        with BackgroundFlusher() as flusher:
            for tmp, name, shard in zip(temporary, names, shards, strict=True):
                if safe_serialization:
                    write_safetensors(tmp, shard, {"format": "pt"}, hashed=False, fsync=False)
                else:
                    _torch_save_file(shard, tmp, fsync=False)
                flusher.submit(_fsync_and_replace, tmp, directory / name)
    finally:
        for tmp in temporary:
            tmp.unlink(missing_ok=True)
    return [directory / name for name in names]


def _fsync_and_replace(tmp: Path, target: Path) -> None:
    fsync_file(tmp)
    os.replace(tmp, target)


def save_model_weights(state_dict: dict[str, torch.Tensor], save_directory: str | os.PathLike[str],
                       max_shard_size: int | str = "10GB", safe_serialization: bool = True,
                       ) -> list[Path]:
    """Write ``state_dict`` in the Hugging Face layout; return the files written.

    One file when it fits in ``max_shard_size``, else ``model-0000i-of-0000n.safetensors``
    shards and ``model.safetensors.index.json``. Stale shards of an earlier save with the
    same base name are removed; nothing else in the directory is touched.
    """
    directory = Path(save_directory)
    if directory.is_file():
        raise CheckpointError(f"save_directory {directory} is a file: give a directory.")
    directory.mkdir(parents=True, exist_ok=True)
    state_dict = clean_state_dict_for_safetensors(state_dict)
    state_dict = {k: v.detach().cpu() for k, v in state_dict.items()}
    shards = _shards(state_dict, convert_file_size_to_int(max_shard_size))
    single, pattern, index_name = ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_PATTERN_NAME,
                                    SAFE_WEIGHTS_INDEX_NAME) if safe_serialization else
                                   (WEIGHTS_NAME, WEIGHTS_PATTERN_NAME, WEIGHTS_INDEX_NAME))
    names = ([single] if len(shards) == 1 else
             [pattern.format(suffix=f"-{i:05d}-of-{len(shards):05d}")
              for i in range(1, len(shards) + 1)])
    written = _write_shards(directory, names, shards, safe_serialization)
    stem, ext = pattern.split("{suffix}")
    stale = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}" + re.escape(ext))
    for old in directory.iterdir():
        if old.name not in names and (stale.fullmatch(old.name) or old.name in (single, index_name)):
            old.unlink()
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state_dict.values())
        index = {"metadata": {"total_size": total},
                 "weight_map": {k: n for n, s in zip(names, shards) for k in s}}
        _atomic_write(directory / index_name, lambda p: p.write_text(json.dumps(index, indent=2)))
        written.append(directory / index_name)
    fsync_dir(directory)
    return written


def load_state_dict_file(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Tensors of one weights file: safetensors, or a torch file read with weights_only."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def checkpoint_files(checkpoint: Path) -> list[Path]:
    """The weight files of a checkpoint: one file, the shards of an index, or a folder's.

    An index may only name files inside its own folder (no absolute path, no ``..``);
    symbolic links are followed (a Hugging Face hub cache snapshot links every file into
    its ``blobs`` folder)."""
    if checkpoint.is_file():
        if checkpoint.name.endswith(".index.json"):
            index = json.loads(checkpoint.read_text())
            weight_map = index.get("weight_map", index)  # or a bare name -> file mapping
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{checkpoint}: 'weight_map' is not a mapping of tensor "
                                      "names to shard files; the index is damaged.")
            return [inside(checkpoint.parent, f, checkpoint, follow_links=True)
                    for f in dict.fromkeys(weight_map.values())]
        return [checkpoint]
    for name in (SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME):
        if (checkpoint / name).is_file():
            return checkpoint_files(checkpoint / name)
    indexes = sorted(checkpoint.glob("*.index.json")) if checkpoint.is_dir() else []
    if len(indexes) == 1:  # a sharded checkpoint whose index has another name
        return checkpoint_files(indexes[0])
    raise CheckpointError(f"No weights in {checkpoint}: expected {SAFE_WEIGHTS_NAME}, "
                          f"{SAFE_WEIGHTS_INDEX_NAME}, {WEIGHTS_NAME}, {WEIGHTS_INDEX_NAME} or "
                          "one other *.index.json.")


def load_model_weights(model: torch.nn.Module, checkpoint: str | os.PathLike[str],
                       dtype: str | torch.dtype | None = None,
                       keep_in_fp32_modules: list[str] | None = None,
                       strict: bool = False) -> None:
    """Load weights (a file, a folder or an index of shards) into a built ``model`` in place.

    Floating tensors are cast to ``dtype`` when given, except in ``keep_in_fp32_modules``.
    ``strict`` raises when names do not match. Empty (meta) models, device maps and
    offloading are accel-inference's ``load_checkpoint_in_model``.
    """
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."))
    keep = tuple(keep_in_fp32_modules or ())
    expected = set(model.state_dict())
    found: set[str] = set()
    for file in checkpoint_files(Path(checkpoint)):
        state = load_state_dict_file(file)
        if dtype is not None:
            state = {k: (v.to(torch.float32 if any(m in k for m in keep) else dtype)
                         if v.is_floating_point() else v) for k, v in state.items()}
        found.update(state)
        model.load_state_dict(state, strict=False)
    missing = sorted(n for n in expected - found if not _tied_to(model, n, found))
    unexpected = sorted(found - expected)
    if strict and (missing or unexpected):
        raise CheckpointError(f"Weights in {checkpoint} do not match the model: missing "
                              f"{missing[:10]}, unexpected {unexpected[:10]}.")
    if missing or unexpected:
        warnings.warn(f"Loading {checkpoint}: missing keys {missing[:10]}, unexpected keys "
                      f"{unexpected[:10]}.", stacklevel=2)


def _tied_to(model: torch.nn.Module, name: str, found: set[str]) -> bool:
    """Whether ``name`` shares memory with a loaded tensor (a tied weight saved once)."""
    state = model.state_dict(keep_vars=True)
    key = id_tensor_storage(state[name])
    return any(id_tensor_storage(state[other]) == key for other in found if other in state)


def save(obj: Any, f: str | os.PathLike[str], save_on_each_node: bool = False,
         safe_serialization: bool = False) -> None:
    """Write ``obj`` to ``f`` from the main process (of each node with ``save_on_each_node``).

    With ``safe_serialization`` a dict whose tensors share memory (tied weights) keeps only
    the first name of each shared tensor and logs the others (safetensors stores no
    aliasing; writing both would store the data twice and load them untied)."""
    from accel_state import PartialState

    state = PartialState()
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return
    path = Path(f)
    if safe_serialization:
        if isinstance(obj, dict):
            obj = clean_state_dict_for_safetensors(obj)
        _atomic_write(path, lambda p: write_safetensors(p, obj, {"format": "pt"}, hashed=False))
    else:
        _atomic_write(path, lambda p: _torch_save_file(obj, p))


def load(f: str | os.PathLike[str], map_location: Any = None, **kwargs: Any) -> Any:
    """Read a torch or safetensors file without unpickling code (``weights_only=True``)."""
    kwargs.setdefault("weights_only", True)
    if not kwargs["weights_only"]:
        raise CheckpointError("accel never unpickles arbitrary objects: load with "
                              "weights_only=True (the default), or use torch.load yourself.")
    if str(f).endswith(".safetensors"):
        tensors = load_state_dict_file(f)
        return {k: v.to(map_location) for k, v in tensors.items()} if map_location else tensors
    return torch.load(f, map_location=map_location, **kwargs)

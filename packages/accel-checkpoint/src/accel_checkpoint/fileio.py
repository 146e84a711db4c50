"""Durable, hashed file I/O: safetensors and JSON written with fsync, read with sha256 checks.

The safetensors files are written here rather than through ``safetensors.torch.save_file``
so each byte is touched once: tensor memory goes straight to the file (no intermediate
``bytes``) while a second thread computes the sha256 the manifest needs, and reading
fills one buffer that is hashed as it arrives and then viewed as tensors without a copy.
The files follow the safetensors format (8-byte little-endian header length, JSON header,
raw little-endian data) and load with any safetensors reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from accel_checkpoint.errors import CorruptCheckpointError
from accel_checkpoint.manifest import FileRecord

__all__ = ["write_safetensors", "read_safetensors", "write_json", "read_json"]

_CHUNK = 32 * 2**20
_DTYPE_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64",
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                     ("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64")):
    if hasattr(torch, _name):
        _DTYPE_CODES[getattr(torch, _name)] = _code
_CODE_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}


class _Hasher:
    """sha256 computed on a worker thread (hashlib releases the GIL on large buffers)."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="accel-checkpoint-sha256",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._sha.update(chunk)

    def update(self, chunk: Any) -> None:
        self._queue.put(chunk)

    def hexdigest(self) -> str:
        self._queue.put(None)
        self._thread.join()
        return self._sha.hexdigest()


def _chunks(view: memoryview) -> Iterable[memoryview]:
    for start in range(0, len(view), _CHUNK):
        yield view[start:start + _CHUNK]


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    """Zero-copy byte view of a CPU tensor (copied only if strided or on a device)."""
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.numel() == 0:
        return memoryview(b"")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def _header(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None
            ) -> tuple[bytes, list[str]]:
    # Widest dtypes first: every tensor then starts at a multiple of its item size, which
    # lets the reader view the buffer as tensors without copying.
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name in order:
        tensor = tensors[name]
        code = _DTYPE_CODES.get(tensor.dtype)
        if code is None:
            from accel_checkpoint.errors import CheckpointError

            raise CheckpointError(f"Tensor {name!r} has dtype {tensor.dtype}, which "
                                  "safetensors cannot store; convert it before saving.")
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": code, "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(len(raw) + 8) % 8)  # pad so the data starts 8-byte aligned
    return len(raw).to_bytes(8, "little") + raw, order


def write_safetensors(path: str | os.PathLike[str], tensors: dict[str, torch.Tensor],
                      metadata: dict[str, str] | None = None) -> FileRecord:
    """Write ``tensors`` as a safetensors file, fsync it, and return its size and sha256."""
    head, order = _header(tensors, metadata)
    hasher = _Hasher()
    size = 0
    with open(path, "wb", buffering=0) as handle:
        for chunk in (memoryview(head), *(_as_bytes(tensors[n]) for n in order)):
            for piece in _chunks(chunk):
                hasher.update(piece)
                written = 0
                while written < len(piece):
                    written += handle.write(piece[written:])
                size += len(piece)
        os.fsync(handle.fileno())
    return FileRecord(size, hasher.hexdigest())


def _read_verified(path: Path, expected: FileRecord | None) -> bytearray:
    """The whole file, its sha256 checked against ``expected`` while it is read."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CorruptCheckpointError(path, "the file is missing (partial checkpoint)") from None
    if expected is not None and size != expected.size:
        raise CorruptCheckpointError(path, f"size is {size} bytes but the manifest says "
                                     f"{expected.size}: the file is truncated or was changed")
    buffer = bytearray(size)
    view = memoryview(buffer)
    hasher = _Hasher() if expected is not None else None
    with open(path, "rb", buffering=0) as handle:
        done = 0
        while done < size:
            got = handle.readinto(view[done:done + _CHUNK])
            if not got:
                raise CorruptCheckpointError(path, "the file shrank while it was read")
            if hasher is not None:
                hasher.update(view[done:done + got])
            done += got
    if hasher is not None and expected is not None:
        digest = hasher.hexdigest()
        if digest != expected.sha256:
            raise CorruptCheckpointError(path, f"sha256 is {digest} but the manifest says "
                                         f"{expected.sha256}: the file is corrupted")
    return buffer


def read_safetensors(path: str | os.PathLike[str], expected: FileRecord | None = None
                     ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file, verified against ``expected``."""
    path = Path(path)
    buffer = _read_verified(path, expected)
    try:
        length = int.from_bytes(buffer[:8], "little")
        header = json.loads(bytes(buffer[8:8 + length]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(path, f"not a safetensors file ({exc})") from None
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + length
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        dtype = _CODE_DTYPES.get(info["dtype"])
        if dtype is None:
            raise CorruptCheckpointError(path, f"tensor {name!r} has unknown dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        if end - begin == 0:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
            continue
        raw = torch.frombuffer(buffer, dtype=torch.uint8, count=end - begin, offset=base + begin)
        if (base + begin) % dtype.itemsize:  # written by another tool, unaligned: copy
            raw = raw.clone()
        tensors[name] = raw.view(dtype).reshape(info["shape"])
    return tensors, metadata


def write_json(path: str | os.PathLike[str], value: Any) -> FileRecord:
    """Write ``value`` as JSON, fsync, and return the record."""
    data = json.dumps(value, indent=1, sort_keys=False).encode()
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return FileRecord(len(data), hashlib.sha256(data).hexdigest())


def read_json(path: str | os.PathLike[str], expected: FileRecord | None = None) -> Any:
    """Parse a JSON file, verified against ``expected`` when given."""
    path = Path(path)
    data = _read_verified(path, expected)
    try:
        return json.loads(bytes(data))
    except ValueError as exc:
        raise CorruptCheckpointError(path, f"invalid JSON ({exc})") from None

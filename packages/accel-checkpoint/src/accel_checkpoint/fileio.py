"""Durable, hashed file I/O: safetensors and JSON written with fsync, read with hash checks.

The safetensors files are written here rather than through ``safetensors.torch.save_file``
so each byte is touched once: tensor memory goes straight to the file (no intermediate
``bytes``) while a thread pool hashes the same memory in ``HASH_CHUNK`` pieces for the
manifest. Reading maps the file copy-on-write (no read copy, no fresh allocation), checks
every chunk's digest in parallel (:mod:`accel_checkpoint.hashing`), and only then views the
mapping as tensors.
The files follow the safetensors format (8-byte little-endian header length, JSON header,
raw little-endian data) and load with any safetensors reader.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from accel_checkpoint.errors import CorruptCheckpointError
from accel_checkpoint.filebytes import FileMapping, hash_pool, map_file, read_file
from accel_checkpoint.hashing import (
    HASH_CHUNK,
    FileRecord,
    check_bytes,
    chunk_digests,
    chunked_record,
    current_digest,
    record_of,
)

__all__ = ["write_safetensors", "read_safetensors", "write_json", "read_json"]

_WRITE = 64 * 2**20  # bytes per write() call
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


class _ChunkHasher:
    """Cuts a stream of buffers at ``HASH_CHUNK`` boundaries and hashes each full chunk
    on the pool while the caller goes on writing (the buffers must stay unchanged)."""

    def __init__(self) -> None:
        self._pieces: list[memoryview] = []
        self._filled = 0
        self._size = 0
        self._futures: list[Future[tuple[bytes, bytes]]] = []
        self._sha256 = current_digest() == "sha256"  # read here: the pool has no context

    def update(self, view: memoryview) -> None:
        self._size += len(view)
        while len(view):
            take = min(len(view), HASH_CHUNK - self._filled)
            self._pieces.append(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == HASH_CHUNK:
                self._flush()

    def _flush(self) -> None:
        if self._pieces:
            self._futures.append(hash_pool().submit(chunk_digests, self._pieces, self._sha256))
        self._pieces, self._filled = [], 0

    def record(self) -> FileRecord:
        self._flush()
        return chunked_record(self._size, HASH_CHUNK, [f.result() for f in self._futures],
                              self._sha256)


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
                      metadata: dict[str, str] | None = None, hashed: bool = True,
                      fsync: bool = True) -> FileRecord | None:
    """Write ``tensors`` as a safetensors file, fsync it, and return its record (size,
    digests). ``hashed=False`` writes without hashing and returns None: for files no
    manifest lists (``save_model``'s weights), where hashing would be wasted work.
    ``fsync=False`` leaves the fsync to the caller (who may overlap it with other writes)."""
    head, order = _header(tensors, metadata)
    hasher = _ChunkHasher() if hashed else None
    with open(path, "wb", buffering=0) as handle:
        for view in (memoryview(head), *(_as_bytes(tensors[n]) for n in order)):
            if hasher is not None:
                hasher.update(view)
            for start in range(0, len(view), _WRITE):
                piece = view[start:start + _WRITE]
                written = 0
                while written < len(piece):
                    written += handle.write(piece[written:])
        if fsync:
            os.fsync(handle.fileno())
    return hasher.record() if hasher is not None else None


def _read_verified(path: Path, expected: FileRecord | None, hashed: bool = True,
                   verified: Any = None, copy: bool = False) -> Any:
    """The file's bytes (a copy-on-write mapping; ``copy``: read into process memory),
    checked against ``expected`` first: its size always, its digests unless
    ``hashed=False`` (the caller verifies them apart). ``verified``: the file's bytes as a
    :class:`Verification` already checked them (used as they are)."""
    if verified is not None:
        return verified
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CorruptCheckpointError(path, "the file is missing (partial checkpoint)") from None
    if expected is not None and size != expected.size:
        raise CorruptCheckpointError(path, f"size is {size} bytes but the manifest says "
                                     f"{expected.size}: the file is truncated or was changed")
    data = read_file(path) if copy else map_file(path)
    if expected is not None and hashed:
        check_bytes(path, data, expected)
    return data


def read_safetensors(path: str | os.PathLike[str], expected: FileRecord | None = None,
                     hashed: bool = True, verified: Any = None, copy: bool = False
                     ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file, verified against ``expected``
    (``hashed=False``: its size only; the caller checks the digests apart; ``verified``:
    the file's bytes from a passed :meth:`Verification.take`, read without mapping again).

    The tensors view the file's mapping unless ``copy``: then they view process memory
    (the file is read, or a mapping handed in is copied) and no mapping outlives this call —
    for a caller that keeps the tensors (an optimizer does), so that deleting the file
    later frees its disk space."""
    path = Path(path)
    buffer = _read_verified(path, expected, hashed, verified, copy)
    mapped = isinstance(buffer, FileMapping)
    try:
        if len(buffer) < 8:
            raise ValueError(f"only {len(buffer)} bytes")
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
        # Views of the mapping (it stays alive as long as a tensor does); writes to them
        # (an optimizer step) copy the touched pages and never reach the file.
        raw = torch.frombuffer(buffer, dtype=torch.uint8, count=end - begin, offset=base + begin)
        if (copy and mapped) or (base + begin) % dtype.itemsize:  # or unaligned (another tool)
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
    return record_of(data)


def read_json(path: str | os.PathLike[str], expected: FileRecord | None = None,
              hashed: bool = True, verified: Any = None) -> Any:
    """Parse a JSON file, verified against ``expected`` when given (see read_safetensors)."""
    path = Path(path)
    data = _read_verified(path, expected, hashed, verified)
    try:
        return json.loads(bytes(data))
    except ValueError as exc:
        raise CorruptCheckpointError(path, f"invalid JSON ({exc})") from None

"""Reading ``torch.distributed.checkpoint`` (DCP) directories without unpickling code.

DCP stores its ``.metadata`` file with plain ``pickle`` and its stock load planner reads
non-tensor values with ``torch.load(weights_only=False)``: torch documents neither as
safe for untrusted files. Here ``.metadata`` goes through an unpickler that only builds
the handful of DCP metadata classes (plus ``torch.Size``, dtypes, layouts and paths),
after its sha256 was checked against our manifest when there is one, and non-tensor
values are read with ``torch.load(weights_only=True)``. Tensors are already read with
``weights_only=True`` by torch's ``FileSystemReader``. Every storage path the metadata
names must lie inside the DCP directory (:func:`accel_checkpoint.containment.inside`).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.planner import ReadItem

from accel_checkpoint.containment import inside
from accel_checkpoint.errors import CorruptCheckpointError
from accel_checkpoint.hashing import FileRecord, check_bytes

__all__ = ["DCP_METADATA_NAME", "read_dcp_metadata", "VerifiedReader", "SafeLoadPlanner",
           "SafeFullLoadPlanner"]

#: File name of DCP's (pickled) metadata inside a checkpoint directory.
DCP_METADATA_NAME = ".metadata"

_DCP_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath",
                "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP metadata objects and nothing else (no callables, no imports of choice)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _DCP_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in DCP metadata")


def read_dcp_metadata(path: str | os.PathLike[str], expected: FileRecord | None = None) -> Any:
    """The DCP ``Metadata`` of ``path`` (a ``.metadata`` file), hash-checked when
    ``expected`` is given, unpickled with an allow-list of DCP's own classes."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CorruptCheckpointError(path, "missing: not a torch.distributed.checkpoint "
                                     "directory, or a partial one") from None
    if expected is not None:
        check_bytes(path, raw, expected)  # the very bytes unpickled below
    try:
        metadata = _MetadataUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:  # any malformed or hostile pickle
        raise CorruptCheckpointError(path, f"not readable as DCP metadata ({type(exc).__name__}"
                                     f": {exc}); accel only reads DCP's own metadata "
                                     "classes") from None
    _check_storage_paths(path, metadata)
    return metadata


def _check_storage_paths(path: Path, metadata: Any) -> None:
    """Refuse metadata whose storage entries name files outside the DCP directory."""
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(storage, dict):
        return
    names = {getattr(info, "relative_path", None) for info in storage.values()}
    for name in sorted(n for n in names if n is not None):
        inside(path.parent, name, path)


class VerifiedReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read by :func:`read_dcp_metadata`."""

    def __init__(self, path: str | os.PathLike[str], expected: FileRecord | None = None) -> None:
        super().__init__(path)
        self._expected = expected

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("rank") is not None:
            raise CorruptCheckpointError(self.path, "per-rank DCP metadata is not supported")
        metadata = read_dcp_metadata(Path(self.path) / DCP_METADATA_NAME, self._expected)
        if getattr(metadata, "storage_meta", None) is None:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _load_plain(value: io.BytesIO) -> Any:
    return torch.load(value, weights_only=True)


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` reading non-tensor values with ``weights_only=True``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        loaded = _load_plain(value)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn],
                        loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class SafeFullLoadPlanner(_EmptyStateDictLoadPlanner):
    """Rebuilds the whole saved state dict (``keys``: only those entries), safely."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        SafeLoadPlanner.load_bytes(self, read_item, value)  # type: ignore[arg-type]

"""Reading ``torch.distributed.checkpoint`` (DCP) directories without unpickling code.

DCP stores its ``.metadata`` file with plain ``pickle`` and its stock load planner reads
non-tensor values with ``torch.load(weights_only=False)``: torch documents neither as
safe for untrusted files. Here ``.metadata`` goes through an unpickler that only builds
the handful of DCP metadata classes (plus ``torch.Size``, dtypes, layouts and paths),
after its digests were checked against our manifest when there is one, and non-tensor
values are read with ``torch.load(weights_only=True)``. Tensors are already read with
``weights_only=True`` by torch's ``FileSystemReader``. Every storage path the metadata
names must lie inside the DCP directory (:func:`accel_checkpoint.containment.inside`).

Given the manifest's records, :class:`VerifiedReader` serves DCP's reads from the very
bytes it hash-checked (each ``.distcp`` file read into memory once), so a file that
changes after an earlier check (another process, a flaky disk) cannot load unverified.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.planner import ReadItem

from accel_checkpoint.containment import inside
from accel_checkpoint.errors import CorruptCheckpointError
from accel_checkpoint.filebytes import huge_page_buffer
from accel_checkpoint.hashing import FileRecord, Verification, check_bytes

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


class _BufferStream(io.RawIOBase):
    """A read-only, seekable stream over bytes already in memory (no copy)."""

    def __init__(self, data: Any) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, out: Any) -> int:
        got = self._view[self._pos:self._pos + len(out)]
        memoryview(out).cast("B")[:len(got)] = got
        self._pos += len(got)
        return len(got)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


class _VerifiedFiles(FileSystem):
    """DCP's file system with every ``"rb"`` stream served from a checked buffer: one
    checked up front (``buffers``), else checked now by ``check`` (a file's path -> its
    checked bytes); a file nobody checked is refused, never opened."""

    def __init__(self, check: Callable[[Path], Any] | None = None) -> None:
        super().__init__()
        self.buffers: dict[Path, Any] = {}
        self.check = check

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        data = self.buffers.pop(Path(path), None)  # each file is read once: free it after
        if data is None and mode == "rb" and self.check is not None:
            data = self.check(Path(path))
        if mode != "rb" or data is None:
            raise CorruptCheckpointError(path, "DCP asked to read a file accel had not "
                                         "hash-checked first; nothing was read from it")
        with _BufferStream(data) as stream:
            yield stream


class VerifiedReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read by :func:`read_dcp_metadata`.

    With ``files`` (the manifest's records), DCP reads only bytes that were checked: each
    file is read into memory once and hashed, and DCP's own reader is served from that
    buffer (freed once read). A file changed after an earlier check is refused.

    ``agree`` (a collective: raises on every rank the first problem any rank passed it)
    is for loads into live objects: every file this rank's plan touches is checked before
    any tensor is filled, and the ranks agree that all of them passed, so a refused load
    changes nothing anywhere (this rank's files are in memory together meanwhile). Without
    it (a load into a fresh dict) files are checked one at a time, as DCP reaches them.
    Without ``files`` (a bare DCP directory, no manifest) DCP reads the files itself.
    """

    def __init__(self, path: str | os.PathLike[str], expected: FileRecord | None = None, *,
                 files: Mapping[str, FileRecord] | None = None,
                 agree: Callable[[str | None], None] | None = None) -> None:
        super().__init__(path)
        self._expected = expected
        self._files = files
        self._agree = agree
        self._served = _VerifiedFiles(None if agree is not None else self._check_one)
        if files is not None:
            self.fs = self._served

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("rank") is not None:
            raise CorruptCheckpointError(self.path, "per-rank DCP metadata is not supported")
        metadata = read_dcp_metadata(Path(self.path) / DCP_METADATA_NAME, self._expected)
        if getattr(metadata, "storage_meta", None) is None:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def read_data(self, plan: Any, planner: Any) -> Any:
        if self._files is None or self._agree is None:
            return super().read_data(plan, planner)
        names = sorted({self.storage_data[item.storage_index].relative_path
                        for item in plan.items})
        problem = None
        try:
            buffers = self._checked(names)
        except CorruptCheckpointError as exc:
            buffers, problem = {}, f"{exc.path}\0{exc.problem}"
        self._agree(problem)  # every rank raises alike, before any rank fills a tensor
        self._served.buffers = {Path(self.path) / n: data for n, data in buffers.items()}
        try:
            return super().read_data(plan, planner)
        finally:
            self._served.buffers = {}

    def _checked(self, names: list[str]) -> dict[str, Any]:
        """The bytes of each of ``names``, read once into memory and hash-checked."""
        root, files = Path(self.path), self._files or {}
        unlisted = [n for n in names if n not in files]
        if unlisted:
            raise CorruptCheckpointError(root / unlisted[0], "named by DCP's metadata but "
                                         "not listed in the manifest")
        wanted = {n: files[n] for n in names}
        check = Verification(root, wanted, keep=True, read=set(wanted),
                             allocate=huge_page_buffer)
        check.wait()
        return {n: check.take(n) for n in names}

    def _check_one(self, file: Path) -> Any:
        name = file.relative_to(Path(self.path)).as_posix()
        return self._checked([name])[name]


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

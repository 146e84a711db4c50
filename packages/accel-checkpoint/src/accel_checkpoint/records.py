"""What a file's record is (:class:`FileRecord`: size, chunk digests, the algorithm it names)
and how its digests are computed from bytes, single-threaded: the digest algorithms
(``xxh3-128`` by default, ``sha256`` on request, :func:`digest_algorithm`), one chunk's
digests (:func:`chunk_digests`) and a record from its chunks' (:func:`chunked_record`).
Spreading the chunks over cores, reading files and checking them is
:mod:`accel_checkpoint.hashing`'s, which re-exports these names. Standard library plus
xxhash: no torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import xxhash

__all__ = ["HASH_CHUNK", "DIGESTS", "check_digest", "digest_algorithm", "current_digest",
           "FileRecord", "chunk_digests", "chunked_record"]

#: Bytes per hashed chunk (format 2): small enough to spread a file over every core.
HASH_CHUNK = 16 * 2**20
#: Bytes hashed by both digests in turn (fits a core's L1/L2 cache).
_CACHE_PIECE = 64 * 2**10
#: The digest algorithms new records can use; the first is the default.
DIGESTS = ("xxh3-128", "sha256")
_DIGEST: ContextVar[str] = ContextVar("accel_checkpoint_digest", default=DIGESTS[0])


def check_digest(name: object) -> str:
    """``name`` if it is one of :data:`DIGESTS`; else a ``CheckpointError`` naming it."""
    if name not in DIGESTS:
        from accel_checkpoint.errors import CheckpointError  # imports accel_state (torch)

        raise CheckpointError(f"checkpoint digest {name!r} is not one accel-checkpoint "
                              f"writes: use one of {list(DIGESTS)}.")
    return str(name)


@contextmanager
def digest_algorithm(name: str) -> Iterator[None]:
    """Records made inside the block (in this thread or context) use ``name``."""
    token = _DIGEST.set(check_digest(name))
    try:
        yield
    finally:
        _DIGEST.reset(token)


def current_digest() -> str:
    """The algorithm new records use here (``"xxh3-128"`` unless :func:`digest_algorithm`)."""
    return _DIGEST.get()


@dataclass(frozen=True)
class FileRecord:
    """Size in bytes and digests of one written file, as the manifest lists it."""

    size: int
    sha256: str = ""
    """sha256 records: sha256 of the concatenated chunk digests (format 1: of the whole
    file); empty in an xxh3-128 record."""
    chunk_size: int = 0
    """Bytes per hashed chunk (``0``: a format-1 record, one sha256 of the whole file)."""
    chunks: tuple[str, ...] = ()
    """sha256 (hex) of each ``chunk_size`` piece of the file, in order (sha256 records)."""
    xxh3: tuple[str, ...] = ()
    """xxh3-128 (hex) of each ``chunk_size`` piece (empty in older sha256 records)."""

    @property
    def algorithm(self) -> str:
        """The record's own algorithm: ``"sha256"`` when it has a sha256, else xxh3-128."""
        return "sha256" if self.sha256 else "xxh3-128"

    @property
    def xxh3_file(self) -> str:
        """xxh3-128 over the concatenated chunk digests: the file's digest in one string."""
        return xxhash.xxh3_128(b"".join(bytes.fromhex(c) for c in self.xxh3)).hexdigest()

    def to_json(self) -> dict[str, Any]:
        if not self.sha256:
            return {"size": self.size, "algorithm": "xxh3-128", "xxh3_128_file": self.xxh3_file,
                    "chunk_size": self.chunk_size, "xxh3_128": list(self.xxh3)}
        out: dict[str, Any] = {"size": self.size, "algorithm": "sha256", "sha256": self.sha256}
        if self.chunk_size:
            out.update(chunk_size=self.chunk_size, chunks=list(self.chunks))
        if self.xxh3:
            out["xxh3_128"] = list(self.xxh3)
        return out

    @classmethod
    def from_json(cls, rec: Any) -> FileRecord:
        algorithm = rec.get("algorithm", "sha256")  # records before names: sha256
        chunk_size = int(rec.get("chunk_size", 0))
        chunks = tuple(str(c) for c in rec.get("chunks", ()))
        xxh3 = tuple(str(c) for c in rec.get("xxh3_128", ()))
        expected = -(-int(rec["size"]) // chunk_size) if chunk_size else 0
        if algorithm == "xxh3-128":
            if not chunk_size or len(xxh3) != expected:
                raise ValueError(f"{len(xxh3)} xxh3_128 chunk digests for {rec['size']} "
                                 f"bytes in chunks of {chunk_size}")
            record = cls(int(rec["size"]), "", chunk_size, (), xxh3)
            if record.xxh3_file != rec.get("xxh3_128_file"):
                raise ValueError("xxh3_128_file does not match the chunk digests")
            return record
        if algorithm != "sha256":
            raise ValueError(f"unknown digest algorithm {algorithm!r}")
        if chunk_size and len(chunks) != expected:
            raise ValueError(f"{len(chunks)} chunk digests for {rec['size']} bytes")
        if xxh3 and len(xxh3) != expected:
            raise ValueError(f"{len(xxh3)} xxh3_128 chunk digests for {rec['size']} bytes")
        return cls(int(rec["size"]), str(rec["sha256"]), chunk_size, chunks, xxh3)


def chunk_digests(pieces: Sequence[Any], sha256: bool = False) -> tuple[bytes, bytes]:
    """``(sha256 or b"", xxh3-128)`` of the concatenation of ``pieces`` (buffers), not joined.

    With ``sha256``, both digests take each ``_CACHE_PIECE`` bytes in turn, so xxh3 reads
    what sha256 has just brought into the core's cache instead of the whole piece again
    from memory (about 30% less time per chunk here)."""
    fast = xxhash.xxh3_128()
    if not sha256:
        for piece in pieces:
            fast.update(piece)
        return b"", fast.digest()
    sha = hashlib.sha256()
    for piece in pieces:
        view = memoryview(piece).cast("B")
        for start in range(0, len(view), _CACHE_PIECE):
            part = view[start:start + _CACHE_PIECE]
            sha.update(part)
            fast.update(part)
    return sha.digest(), fast.digest()


def _sha256(pieces: Sequence[Any]) -> bytes:
    sha = hashlib.sha256()
    for piece in pieces:
        sha.update(piece)
    return sha.digest()


def _xxh3(piece: Any) -> bytes:
    return xxhash.xxh3_128(piece).digest()


def chunked_record(size: int, chunk_size: int, digests: Sequence[tuple[bytes, bytes]],
                   sha256: bool = False) -> FileRecord:
    """The record of a file of ``size`` bytes from its chunks' :func:`chunk_digests`
    (``sha256``: they were made with it, and the record is a sha256 one)."""
    fasts = tuple(fast.hex() for _, fast in digests)
    if not sha256:
        return FileRecord(size, "", chunk_size, (), fasts)
    shas = [sha for sha, _ in digests]
    return FileRecord(size, hashlib.sha256(b"".join(shas)).hexdigest(), chunk_size,
                      tuple(d.hex() for d in shas), fasts)

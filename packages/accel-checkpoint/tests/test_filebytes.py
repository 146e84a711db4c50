"""Files read into process memory: each chunk hashed as it is read (one pass), in fresh
memory that keeps no file, and refused naming the file when the bytes are wrong or short."""

from __future__ import annotations

import pytest

from accel_checkpoint import CorruptCheckpointError, filebytes, hashing


def _blob(tmp_path, size: int = 3 * 4096 + 100):
    data = bytes((i * 7) % 251 for i in range(size))
    file = tmp_path / "blob.bin"
    file.write_bytes(data)
    return file, data


def test_read_and_digest_fills_the_buffer_and_matches_the_chunk_records(tmp_path):
    file, data = _blob(tmp_path)
    record = hashing.record_of(data, chunk_size=4096)
    buffer = bytearray(len(data))
    digests = [filebytes.read_and_digest(file, buffer, s, 4096).hex()
               for s in range(0, len(data), 4096)]
    assert bytes(buffer) == data
    assert tuple(digests) == record.xxh3


def test_read_and_digest_refuses_a_file_shorter_than_the_buffer(tmp_path):
    file, data = _blob(tmp_path)
    with pytest.raises(OSError, match="changed after its size was checked"):
        filebytes.read_and_digest(file, bytearray(len(data) + 10), len(data) - 50, 4096)


@pytest.mark.parametrize("digest", hashing.DIGESTS)
def test_a_read_file_is_checked_from_the_bytes_read_and_maps_nothing(tmp_path, digest):
    """Verification(read=...) hands over fresh memory (no file mapping), holding exactly the
    file's bytes, for xxh3-128 records (read and hashed in one pass) and sha256 ones (read,
    then hashed); one damaged byte is refused naming the file and the chunk."""
    file, data = _blob(tmp_path)
    with hashing.digest_algorithm(digest):
        record = hashing.record_of(data, chunk_size=4096)
    check = hashing.Verification(tmp_path, {file.name: record}, keep=True, read={file.name})
    taken = check.take(file.name)
    assert not isinstance(taken, filebytes.FileMapping)
    assert bytes(taken) == data

    damaged = bytearray(data)
    damaged[4096 + 3] ^= 0x10
    file.write_bytes(bytes(damaged))
    check = hashing.Verification(tmp_path, {file.name: record}, keep=True, read={file.name},
                                 fast=digest != "sha256")
    with pytest.raises(CorruptCheckpointError, match=r"blob\.bin.*chunk 1"):
        check.wait()
    with pytest.raises(CorruptCheckpointError):
        check.take(file.name)


def test_a_file_that_shrinks_while_it_is_read_is_refused_naming_it(tmp_path, monkeypatch):
    file, data = _blob(tmp_path)
    record = hashing.record_of(data, chunk_size=4096)
    real = filebytes.read_and_digest

    def shrinking(path, buffer, start, size):
        if start == 4096:
            path.write_bytes(data[:5000])  # cut short after the size check passed
        return real(path, buffer, start, size)

    monkeypatch.setattr(hashing, "read_and_digest", shrinking)
    check = hashing.Verification(tmp_path, {file.name: record}, keep=True, read={file.name})
    with pytest.raises(CorruptCheckpointError, match=r"blob\.bin.*could not be read whole"):
        check.wait()


def test_tensors_viewing_a_read_copy_keep_no_mapping_of_the_file(tmp_path):
    """A tensor viewing the memory keeps the memory alive, never the file."""
    import torch

    file, data = _blob(tmp_path, size=4 * 2**20)
    buffer = filebytes.huge_page_buffer(len(data))
    filebytes.read_into(file, buffer)
    view = torch.frombuffer(buffer, dtype=torch.uint8)
    del buffer
    assert bytes(view[:16].numpy()) == data[:16]
    maps = open("/proc/self/maps").read()
    assert str(file) not in maps

"""State dicts round-trip through safetensors + JSON exactly, and the files are standard."""

from __future__ import annotations

import json

import pytest
import torch
from accel_checkpoint.errors import CheckpointError, CorruptCheckpointError
from accel_checkpoint.fileio import read_safetensors, write_safetensors
from accel_checkpoint.manifest import FileRecord, hash_file
from accel_checkpoint.tree import flatten_state, unflatten_state

safetensors_torch = pytest.importorskip("safetensors.torch")


def _roundtrip(state):
    skeleton, tensors = flatten_state(state)
    return unflatten_state(json.loads(json.dumps(skeleton)), tensors)


def test_optimizer_like_tree_round_trips_with_int_keys_tuples_and_dtypes():
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}},
             "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0], "x": None}],
             "dtype": torch.bfloat16, "nan": float("inf"), "__tensor__": "not a tag"}
    back = _roundtrip(state)
    assert set(back["state"]) == {0}
    assert torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert back["param_groups"] == state["param_groups"]
    assert back["dtype"] is torch.bfloat16 and back["__tensor__"] == "not a tag"


def test_flat_model_state_keeps_parameter_names():
    model = torch.nn.Linear(3, 2)
    skeleton, tensors = flatten_state(model.state_dict())
    assert sorted(tensors) == ["bias", "weight"]


def test_unsupported_value_is_refused_with_its_path():
    with pytest.raises(CheckpointError, match="'a/b'"):
        flatten_state({"a": {"b": object()}})


def test_numpy_values_become_tensors_and_scalars():
    np = pytest.importorskip("numpy")
    back = _roundtrip({"arr": np.arange(3), "n": np.int64(4)})
    assert torch.equal(back["arr"], torch.arange(3)) and back["n"] == 4


def test_written_file_is_standard_safetensors_with_every_dtype(tmp_path):
    tensors = {"f32": torch.randn(3, 5), "bf16": torch.randn(7).bfloat16(),
               "u8": torch.arange(5, dtype=torch.uint8), "i64": torch.arange(3),
               "b": torch.tensor([True, False, True]), "empty": torch.empty(0, 4),
               "scalar": torch.tensor(2.5, dtype=torch.float64),
               "strided": torch.arange(12.0).reshape(3, 4).t()}
    record = write_safetensors(tmp_path / "x.safetensors", tensors, {"format": "pt"})
    assert record == hash_file(tmp_path / "x.safetensors")
    theirs = safetensors_torch.load_file(tmp_path / "x.safetensors")
    ours, meta = read_safetensors(tmp_path / "x.safetensors", record)
    assert meta == {"format": "pt"}
    for name, tensor in tensors.items():
        assert torch.equal(theirs[name], tensor) and torch.equal(ours[name], tensor), name
        assert ours[name].dtype == tensor.dtype and ours[name].shape == tensor.shape


def test_unhashed_write_is_the_same_file_without_a_record(tmp_path):
    """save_model's files are listed in no manifest: they are written without hashing."""
    tensors = {"w": torch.randn(64, 3), "b": torch.arange(4)}
    record = write_safetensors(tmp_path / "hashed.safetensors", tensors, {"format": "pt"})
    assert write_safetensors(tmp_path / "plain.safetensors", tensors, {"format": "pt"},
                             hashed=False) is None
    assert (tmp_path / "plain.safetensors").read_bytes() == (
        tmp_path / "hashed.safetensors").read_bytes()
    assert hash_file(tmp_path / "plain.safetensors") == record


def test_reader_accepts_files_written_by_safetensors(tmp_path):
    tensors = {"a": torch.arange(3, dtype=torch.uint8), "b": torch.randn(4, dtype=torch.float64)}
    safetensors_torch.save_file(tensors, tmp_path / "y.safetensors")
    ours, _ = read_safetensors(tmp_path / "y.safetensors")
    assert all(torch.equal(ours[k], v) for k, v in tensors.items())


def test_reader_names_a_flipped_or_truncated_file(tmp_path):
    path = tmp_path / "z.safetensors"
    record = write_safetensors(path, {"w": torch.randn(100)})
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="xxh3-128 of chunk 0") as info:
        read_safetensors(path, record)
    assert info.value.path == str(path)
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(CorruptCheckpointError, match="size"):
        read_safetensors(path, FileRecord(record.size, record.sha256))


def test_default_xxh3_records_name_the_damaged_chunk_whoever_checks():
    """By default a record holds xxh3-128 digests only (per chunk and for the file), names
    its algorithm, and is checked with xxh3-128 by loading and `accel checkpoint verify`."""
    import xxhash
    from accel_checkpoint.hashing import FileRecord, check_bytes, record_of

    data = bytearray(range(256)) * 4
    record = record_of(bytes(data), chunk_size=100)
    assert record.algorithm == "xxh3-128" and not record.sha256 and not record.chunks
    assert len(record.xxh3) == 11 and record.xxh3[0] == xxhash.xxh3_128(data[:100]).hexdigest()
    rec = record.to_json()
    assert rec["algorithm"] == "xxh3-128" and "sha256" not in rec
    assert FileRecord.from_json(rec) == record
    check_bytes("f", bytes(data), record, fast=False)  # intact: no error
    data[250] ^= 0x01
    for fast in (True, False):
        with pytest.raises(CorruptCheckpointError, match=r"xxh3-128 of chunk 2 \(bytes 200-300"):
            check_bytes("f", bytes(data), record, fast=fast)
    with pytest.raises(ValueError, match="xxh3_128_file"):
        FileRecord.from_json({**rec, "xxh3_128_file": "0" * 32})
    with pytest.raises(ValueError, match="xxh3_128 chunk digests"):
        FileRecord.from_json({**rec, "xxh3_128": rec["xxh3_128"][:3]})
    with pytest.raises(ValueError, match="'crc32'"):
        FileRecord.from_json({**rec, "algorithm": "crc32"})
    assert record_of(b"").xxh3 == () and FileRecord.from_json(record_of(b"").to_json())


def test_chunked_digests_name_the_damaged_chunk(tmp_path):
    """sha256 records (on request) hold both digests of every chunk; loading checks
    xxh3-128, `accel checkpoint verify` sha256, records without xxh3 digests fall back to
    sha256; each names the chunk."""
    import hashlib

    import xxhash
    from accel_checkpoint.hashing import FileRecord, check_bytes, digest_algorithm, record_of

    data = bytearray(range(256)) * 4
    with digest_algorithm("sha256"):
        record = record_of(bytes(data), chunk_size=100)
    assert record.algorithm == "sha256" and record.to_json()["algorithm"] == "sha256"
    assert len(record.chunks) == len(record.xxh3) == 11 and record.size == len(data)
    assert record.chunks[0] == hashlib.sha256(bytes(data[:100])).hexdigest()
    assert record.xxh3[0] == xxhash.xxh3_128(bytes(data[:100])).hexdigest()
    assert FileRecord.from_json(record.to_json()) == record
    check_bytes("f", bytes(data), record)  # intact: no error
    check_bytes("f", bytes(data), record, fast=False)
    data[250] ^= 0x01
    with pytest.raises(CorruptCheckpointError, match=r"xxh3-128 of chunk 2 \(bytes 200-300\)"):
        check_bytes("f", bytes(data), record)
    with pytest.raises(CorruptCheckpointError, match=r"sha256 of chunk 2 \(bytes 200-300\)"):
        check_bytes("f", bytes(data), record, fast=False)
    older = FileRecord(record.size, record.sha256, record.chunk_size, record.chunks)
    assert "xxh3_128" not in older.to_json()
    with pytest.raises(CorruptCheckpointError, match=r"sha256 of chunk 2"):
        check_bytes("f", bytes(data), older)  # no xxh3 digests: sha256
    with pytest.raises(ValueError, match="xxh3_128"):
        FileRecord.from_json({**record.to_json(), "xxh3_128": record.to_json()["xxh3_128"][:3]})
    with digest_algorithm("sha256"):
        assert record_of(b"").chunks == ()


def test_chunk_digests_of_pieces_larger_than_the_cache_piece_match_the_whole():
    """chunk_digests feeds both hashes 64 KiB at a time: the digests must still be those of
    the concatenated pieces, whatever their sizes and boundaries."""
    import hashlib

    import xxhash
    from accel_checkpoint.records import _CACHE_PIECE, chunk_digests

    data = bytes(range(256)) * ((3 * _CACHE_PIECE) // 256) + b"tail"
    pieces = [data[:7], memoryview(data)[7:2 * _CACHE_PIECE + 13], data[2 * _CACHE_PIECE + 13:]]
    sha, fast = chunk_digests(pieces, sha256=True)
    assert sha == hashlib.sha256(data).digest()
    assert chunk_digests(pieces) == (b"", fast)  # xxh3-128 only by default
    assert fast == xxhash.xxh3_128(data).digest()
    assert chunk_digests([], sha256=True) == (hashlib.sha256().digest(),
                                             xxhash.xxh3_128().digest())

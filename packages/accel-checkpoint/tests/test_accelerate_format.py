"""Reading Accelerate's save_state folders: detection, every kind of file, numbering, and
refusing files a weights-only load cannot read (never unpickling arbitrary objects)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from accel_checkpoint.accelerate_format import (
    is_accelerate_checkpoint,
    read_accelerate_checkpoint,
)
from accel_checkpoint.errors import CorruptCheckpointError

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


class _Hostile:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_reads_every_state_of_each_rank(kind):
    path = FIXTURES / kind
    assert is_accelerate_checkpoint(path)
    for rank in (0, 1):
        checkpoint = read_accelerate_checkpoint(path, rank)
        expected = torch.load(FIXTURES / f"expected-{kind}-rank{rank}.pt", weights_only=True)
        assert len(checkpoint.models) == 2 and len(checkpoint.optimizers) == 2
        for got, want in zip(checkpoint.models, expected["models"], strict=True):
            torch.testing.assert_close(got, want)
        assert checkpoint.schedulers == [expected["scheduler"]]
        assert checkpoint.custom == [{"n": expected["counter"]}]
        assert set(checkpoint.rng) >= {"random_state", "numpy_random_seed", "torch_manual_seed"}
    assert read_accelerate_checkpoint(path, 5).rng is None  # no such rank saved


def test_detection(tmp_path):
    assert not is_accelerate_checkpoint(tmp_path / "missing")
    assert not is_accelerate_checkpoint(tmp_path)  # empty
    shutil.copytree(FIXTURES / "bin", tmp_path / "ours")
    (tmp_path / "ours" / "manifest.json").write_text("{}")  # accel's own format wins
    assert not is_accelerate_checkpoint(tmp_path / "ours")


def test_a_hostile_pickle_is_refused_not_run(tmp_path):
    path = shutil.copytree(FIXTURES / "bin", tmp_path / "ckpt")
    torch.save({"state": _Hostile()}, path / "optimizer_1.bin")
    with pytest.raises(CorruptCheckpointError, match=r"optimizer_1\.bin.*weights_only=True"):
        read_accelerate_checkpoint(path)


def test_a_gap_in_the_numbering_is_named(tmp_path):
    path = shutil.copytree(FIXTURES / "bin", tmp_path / "ckpt")
    (path / "optimizer.bin").unlink()
    with pytest.raises(ValueError, match="optimizer_1.bin.*gap"):
        read_accelerate_checkpoint(path)

"""A save never deletes or renames what it did not write: a target holding someone else's
files is refused (listing them), an accel checkpoint is overwritten as before, an
unwritable target is named, and rotation deletes only accel checkpoints of its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from accel_checkpoint import CheckpointManager, load_checkpoint, save_checkpoint
from accel_checkpoint.errors import CheckpointExistsError, CheckpointWriteError
from accel_checkpoint.sharded import save_sharded_state
from accel_checkpoint.targets import foreign_entries
from torch import nn

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (files) or link target (links)."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            found[rel] = (f"-> {os.readlink(path)}" if path.is_symlink() else
                          path.read_bytes() if path.is_file() else "dir")
    return found


def _kept_everything(root: Path, before: dict[str, bytes | str]) -> None:
    after = _tree(root)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing changed
    assert not [k for k in after if ".tmp-" in k or ".old-" in k]  # nothing left behind


def test_a_folder_of_other_files_is_refused_and_kept(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "results.csv").write_text("a,b\n")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match=r"not an accel checkpoint.*notes\.txt, "
                       r"results\.csv.*another") as info:
        save_checkpoint(target, {"model": _model()})
    assert isinstance(info.value, FileExistsError) and info.value.path == str(target)
    _kept_everything(tmp_path, before)


def test_a_regular_file_at_the_target_is_refused_not_renamed(tmp_path):
    (tmp_path / "ckpt").write_text("a file")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match="a file of that name exists"):
        save_checkpoint(tmp_path / "ckpt", {"model": _model()})
    _kept_everything(tmp_path, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_symlink_at_the_target_is_refused(tmp_path):
    first = save_checkpoint(tmp_path / "first", {"model": _model()})
    (tmp_path / "latest").symlink_to(first)
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match="symbolic link"):
        save_checkpoint(tmp_path / "latest", {"model": _model(1)})
    _kept_everything(tmp_path, before)


def test_an_accelerate_checkpoint_at_the_target_is_refused(tmp_path):
    target = shutil.copytree(FIXTURES / "bin", tmp_path / "ckpt")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match="optimizer.bin"):
        save_checkpoint(target, {"model": _model()})
    _kept_everything(tmp_path, before)


def test_an_accel_checkpoint_is_overwritten_and_files_beside_it_are_kept(tmp_path):
    (tmp_path / "empty").mkdir()
    save_checkpoint(tmp_path / "empty", {"model": _model()})  # an empty folder: fine
    path = save_checkpoint(tmp_path / "ckpt", {"model": _model()})
    (tmp_path / "notes.txt").write_text("next to it")
    save_checkpoint(path, {"model": _model(1)})
    fresh = _model(2)
    load_checkpoint(path, {"model": fresh})
    assert torch.equal(fresh.weight, _model(1).weight)
    assert (tmp_path / "notes.txt").read_text() == "next to it"
    assert foreign_entries(path) == []


def test_a_foreign_file_inside_a_checkpoint_blocks_the_overwrite(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", {"model": _model()})
    (path / "notes.txt").write_text("mine")
    (path / "plots").mkdir()
    (path / "plots" / "loss.png").write_bytes(b"png")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match=r"does not list \(notes\.txt, plots/\)"):
        save_checkpoint(path, {"model": _model(1)})
    _kept_everything(tmp_path, before)


def test_an_unwritable_target_is_named_not_the_staging_folder(tmp_path):
    (tmp_path / "blocker").write_text("a file where a folder should be")
    with pytest.raises(CheckpointWriteError) as info:
        save_checkpoint(tmp_path / "blocker" / "ckpt", {"model": _model()})
    message = str(info.value)
    assert str(tmp_path / "blocker" / "ckpt") in message and ".tmp-" not in message
    assert isinstance(info.value, OSError) and info.value.errno is not None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_parent_is_named(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        with pytest.raises(CheckpointWriteError, match=r"ro/ckpt.*Permission denied"):
            save_checkpoint(parent / "ckpt", {"model": _model()})
    finally:
        parent.chmod(0o755)


def test_sharded_saves_refuse_foreign_targets_too(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointExistsError, match="notes.txt"):
        save_sharded_state(target, {"model": _model()})
    with pytest.raises(CheckpointWriteError, match="notes.txt/ckpt"):
        save_sharded_state(target / "notes.txt" / "ckpt", {"model": _model()})
    _kept_everything(tmp_path, before)


def test_rotation_deletes_only_accel_checkpoints_without_foreign_files(tmp_path):
    (tmp_path / "checkpoint_0").mkdir()
    (tmp_path / "checkpoint_0" / "notes.txt").write_text("not a checkpoint")
    shutil.copytree(FIXTURES / "safetensors", tmp_path / "checkpoint_1")  # Accelerate's
    manager = CheckpointManager(tmp_path, total_limit=1)
    annotated = manager.save({"model": _model()}, step=2)
    (annotated / "README.md").write_text("the good run")
    before = _tree(tmp_path)
    with pytest.warns(UserWarning, match=r"not deleting .*checkpoint_2.*README\.md"):
        manager.save({"model": _model()}, step=3)
    with pytest.warns(UserWarning, match="checkpoint_2"):
        manager.save({"model": _model()}, step=4)  # deletes checkpoint_3 (its own, plain)
    assert {k: v for k, v in _tree(tmp_path).items() if k in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_0", "checkpoint_1",
                                                         "checkpoint_2", "checkpoint_4"]

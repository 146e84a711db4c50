"""What interrupted saves and rotations leave is cleaned by the next save, never another
live job's folders: a save killed at each point, then a save in a fresh process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from accel_checkpoint import CheckpointManager, load_checkpoint
from accel_checkpoint.leftovers import GRACE_S, claim, clean_leftovers, release
from accel_checkpoint.manifest import list_checkpoints
from torch import nn

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

_SAVE = """
import os, shutil, sys, torch
from accel_checkpoint import CheckpointManager
from accel_checkpoint import leftovers, saving

root, kill_at, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
real_replace, real_rmtree = os.replace, shutil.rmtree

def replace(src, dst):
    # a commit renames the staging folder into place (after parking the old copy when it
    # replaces a checkpoint): killed there, the staging folder is complete, manifest and
    # all, and never renamed; over an existing checkpoint, the old copy is parked too
    if kill_at in ("before-rename", "between-renames") and ".tmp-" in str(src):
        os._exit(9)
    real_replace(src, dst)

def rmtree(path, *args, **kwargs):
    if kill_at == "mid-rotation" and ".deleting-" in str(path):
        os.remove(os.path.join(path, "model.safetensors"))
        os._exit(9)  # half deleted
    real_rmtree(path, *args, **kwargs)

saving.os.replace = replace
leftovers.shutil.rmtree = rmtree
model = torch.nn.Linear(3, 3)
torch.nn.init.constant_(model.weight, float(step))
CheckpointManager(root, total_limit=2).save({"model": model}, step=step, rng=False)
"""


def _killed_save(root: Path, step: int, kill_at: str) -> None:
    done = subprocess.run([sys.executable, "-c", _SAVE, str(root), kill_at, str(step)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr


def _save(root: Path, step: int) -> None:
    model = nn.Linear(3, 3)
    torch.nn.init.constant_(model.weight, float(step))
    CheckpointManager(root, total_limit=2).save({"model": model}, step=step, rng=False)


def _age(root: Path) -> None:
    """Make every leftover older than the grace period (as a restart minutes later sees)."""
    past = time.time() - GRACE_S - 5
    for child in root.iterdir():
        os.utime(child, (past, past))


def _weight(path: Path) -> float:
    model = nn.Linear(3, 3)
    load_checkpoint(path, {"model": model}, rng=False)
    return float(model.weight[0, 0].detach())


@pytest.mark.parametrize("kill_at", ["before-rename", "between-renames", "mid-rotation"])
def test_a_save_killed_at_each_point_is_cleaned_by_the_next(tmp_path, kill_at, caplog):
    root = tmp_path / "checkpoints"
    _save(root, 1)
    _save(root, 2)
    # the killed save (another process): a new step, or over step 2 (between-renames)
    _killed_save(root, 2 if kill_at == "between-renames" else 3, kill_at)
    leftovers = sorted(p.name for p in root.iterdir() if "." in p.name)
    expected = {"before-rename": [".tmp-"], "between-renames": [".old-", ".tmp-"],
                "mid-rotation": [".deleting-"]}[kill_at]
    assert [n for n in leftovers if any(i in n for i in expected)] == leftovers
    assert len(leftovers) == len(expected), sorted(os.listdir(root))
    _age(root)
    with caplog.at_level(logging.WARNING, logger="accel_checkpoint"):
        _save(root, 4)
    assert all(name in caplog.text for name in leftovers)  # each clean-up is logged
    names = sorted(os.listdir(root))
    assert all("." not in n for n in names), names  # no staging, parked or half-deleted
    infos = list_checkpoints(root)
    assert all(info.ok for info in infos), [(i.path.name, i.status) for i in infos]
    assert names[-1] == "checkpoint_4" and len(names) == 2 and _weight(root / names[-1]) == 4.0
    if kill_at == "between-renames":  # the parked old copy was put back, then rotated
        assert "put back" in caplog.text


def test_folders_held_by_a_live_save_or_too_young_are_left_alone(tmp_path):
    root = tmp_path / "checkpoints"
    root.mkdir()
    held = root / "checkpoint_7.tmp-0123456789ab"  # another job's save, still writing
    young = root / "checkpoint_8.tmp-0123456789ac"  # just created, not locked yet
    stale = root / "checkpoint_9.tmp-0123456789ad"
    users = root / "results.tmp-mine"  # named like ours, but not by accel: never touched
    for folder in (held, young, stale, users):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(held)!r}, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        past = time.time() - GRACE_S - 5
        for folder in (held, stale, users):
            os.utime(folder, (past, past))
        assert clean_leftovers(root) == [stale]
        assert held.exists() and young.exists() and not stale.exists()
        claim(young)  # this process's own save in flight (an async save): held as well
        os.utime(young, (past, past))
        assert clean_leftovers(root) == []
        release(young)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(clean_leftovers(root)) == [held, young]  # once their holders are gone
    assert users.exists()


def test_a_parked_copy_whose_checkpoint_exists_again_is_removed(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 1)
    parked = root / "checkpoint_1.old-0123456789ab"
    parked.mkdir()
    (parked / "model.safetensors").write_bytes(b"old")
    _age(root)
    assert clean_leftovers(root) == [parked] and _weight(root / "checkpoint_1") == 1.0


# --- per-rank layouts (every rank writes its own files: FSDP2 shards, DeepSpeed) -----------

_RANK_SAVE = """
import os, shutil, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[4])
from checkpoint_writers import SafetensorsWriter
from accel_checkpoint import leftovers, per_rank, saving
from accel_checkpoint.manager import rotate_checkpoints

root, kill_at, step = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
real_replace, real_rmtree, real_write = os.replace, shutil.rmtree, per_rank._write_and_hash

def replace(src, dst):
    if kill_at in ("before-rename", "between-renames") and ".tmp-" in str(src):
        os._exit(9)
    real_replace(src, dst)

def rmtree(path, *args, **kwargs):
    if kill_at == "mid-rotation" and ".deleting-" in str(path):
        os.remove(os.path.join(path, "rank0.safetensors"))
        os._exit(9)  # half deleted
    real_rmtree(path, *args, **kwargs)

def write_and_hash(*args, **kwargs):
    files = real_write(*args, **kwargs)
    if kill_at == "mid-write":  # this rank's files written, nothing committed
        os._exit(9)
    return files

saving.os.replace = replace
leftovers.shutil.rmtree = rmtree
per_rank._write_and_hash = write_and_hash
model = torch.nn.Linear(3, 3)
torch.nn.init.constant_(model.weight, float(step))
per_rank.save_rank_state(root / f"checkpoint_{step}", SafetensorsWriter(), {"model": model},
                         on_commit=lambda p: rotate_checkpoints(root, 2, r"checkpoint_\\d+",
                                                                protect=p))
"""


def _rank_save(root: Path, step: int, kill_at: str = "none") -> None:
    """A per-rank save (rotation: the 2 newest kept), in another process; ``kill_at``: where
    it dies."""
    done = subprocess.run([sys.executable, "-c", _RANK_SAVE, str(root), kill_at, str(step),
                           str(Path(__file__).parent)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == (0 if kill_at == "none" else 9), done.stderr


@pytest.mark.parametrize(("kill_at", "cleaner"), [
    ("mid-write", "save"), ("before-rename", "load"), ("between-renames", "load"),
    ("mid-rotation", "save")])
def test_a_killed_per_rank_save_is_cleaned_by_the_next_save_or_load(tmp_path, kill_at,
                                                                      cleaner, caplog):
    from accel_checkpoint.per_rank import load_rank_state, save_rank_state
    from checkpoint_writers import SafetensorsWriter

    root = tmp_path / "checkpoints"
    _rank_save(root, 1)
    _rank_save(root, 2)
    _rank_save(root, 2 if kill_at == "between-renames" else 3, kill_at)
    leftovers = sorted(p.name for p in root.iterdir() if "." in p.name)
    expected = {"mid-write": [".tmp-"], "before-rename": [".tmp-"],
                "between-renames": [".old-", ".tmp-"], "mid-rotation": [".deleting-"]}[kill_at]
    assert len(leftovers) == len(expected), leftovers
    assert all(any(i in n for i in expected) for n in leftovers), leftovers
    _age(root)
    with caplog.at_level(logging.WARNING, logger="accel_checkpoint"):
        if cleaner == "load":  # of checkpoint_2: put back when a save over it was killed
            model = nn.Linear(3, 3)
            load_rank_state(root / "checkpoint_2", SafetensorsWriter(), {"model": model})
            assert float(model.weight[0, 0].detach()) == 2.0
        else:
            model = nn.Linear(3, 3)
            torch.nn.init.constant_(model.weight, 4.0)
            save_rank_state(root / "checkpoint_4", SafetensorsWriter(), {"model": model})
    assert all(name in caplog.text for name in leftovers)  # each clean-up is logged
    names = sorted(os.listdir(root))
    assert all("." not in n for n in names), names  # no staging, parked or half-deleted
    assert all(info.ok for info in list_checkpoints(root))
    if kill_at == "between-renames":
        assert "put back" in caplog.text


def test_a_staging_folder_another_rank_still_writes_in_is_left_alone(tmp_path):
    """The ranks of a per-rank save all hold its staging folder: the one that made it may
    be gone (killed) while another still writes there, and nothing cleans it meanwhile."""
    root = tmp_path / "checkpoints"
    staging = root / "checkpoint_1.tmp-0123456789ab"
    staging.mkdir(parents=True)
    claim(staging)  # rank 0 made it
    other_rank = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from accel_checkpoint.leftovers import claim
        claim(Path({str(staging)!r}))  # joins while rank 0 holds it
        print("writing", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert other_rank.stdout.readline().strip() == "writing"
        release(staging)  # rank 0 is gone
        _age(root)
        assert clean_leftovers(root) == [] and staging.is_dir()
    finally:
        other_rank.kill()
        other_rank.wait()
    assert clean_leftovers(root) == [staging] and not staging.exists()

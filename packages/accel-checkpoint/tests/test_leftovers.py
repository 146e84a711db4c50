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

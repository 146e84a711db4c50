"""Per-rank checkpoints (FSDP2 shards) killed mid-save, in one launch of 2 processes whose
restarts resume (issue 39.1): what a rank killed mid-rotation and mid-write left is cleaned
by the restarted run's load, a stale staging folder by the first save, another live job's
folder is never touched, and only the last good checkpoint is ever loaded.
(scripts/checkpoint_per_rank_crash.py; the DeepSpeed layout's kill is folded into
deepspeed/test_deepspeed.py's launches.)"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.multiprocess,
              pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")]


def _port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _hold(folder: Path) -> subprocess.Popen[str]:
    """Another job's rank still writing into ``folder``: it holds the shared lock a save's
    ranks take."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, time
        fd = os.open({str(folder)!r}, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _lines(out: str, tag: str) -> dict[int, str]:
    """Rank 0's ``TAG <attempt> REST`` lines: attempt -> REST (the last one per attempt)."""
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(rf"^{tag} (\d+) ?(.*)$", out, re.MULTILINE)}


def test_killed_sharded_saves_leave_nothing_behind(launch, explain, scripts, tmp_path):
    from accel_checkpoint.manifest import list_checkpoints

    work = tmp_path / "run"
    root = work / "checkpoints"
    stale, live = root / "checkpoint_8.tmp-0123456789ab", root / "checkpoint_9.tmp-0123456789ac"
    for folder in (stale, live):
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"x")
        past = time.time() - 600  # an earlier job's, long ago
        os.utime(folder, (past, past))
    holder = _hold(live)
    try:
        proc = launch("--cpu", "--num_processes", "2", "--max_restarts", "2",
                      "--monitor_interval", "0.2", "--main_process_port", _port(),
                      str(scripts / "checkpoint_per_rank_crash.py"), str(work), timeout=400)
        assert proc.returncode == 0, explain(proc, tail=6000)
        assert live.is_dir() and (live / "__0_0.distcp").exists(), "a live job's folder went"
    finally:
        holder.kill()
        holder.wait()
    out = proc.stdout
    assert "KILLING 0 rank=0" in out and "KILLING 1 rank=1" in out, explain(proc, tail=6000)
    start, after = _lines(out, "START"), _lines(out, "AFTER-LOAD")
    saving, loaded = _lines(out, "SAVING"), _lines(out, "LOADED")
    # the first save of attempt 0 cleaned the stale staging folder, not the held one
    first_saved = re.search(r"^SAVED 0 (.*)$", out, re.MULTILINE).group(1)
    assert first_saved == f"checkpoint_0,{live.name}", out
    # attempt 0's rank 0 died mid-rotation: checkpoint_0 half deleted under another name
    assert re.fullmatch(rf"checkpoint_0\.deleting-[0-9a-f]{{12}},checkpoint_1,checkpoint_2,"
                        rf"{live.name}", start[1]), start
    # attempt 1's rank 1 died with its files in the staging folder: nothing committed
    assert re.fullmatch(rf"checkpoint_1,checkpoint_2,checkpoint_3\.tmp-[0-9a-f]{{12}},"
                        rf"{live.name}", start[2]), start
    # each restarted run's load cleaned what the kill left, before anything was read
    assert after[1] == after[2] == f"checkpoint_1,checkpoint_2,{live.name}", after
    # and loaded the last good checkpoint, the weights it was saved with; the resumed save
    # equals the killed one
    at_save = saving[0].split()  # attempt 0's last: checkpoint_2
    assert at_save[0] == "checkpoint_2", saving
    assert loaded[1] == loaded[2] == f"checkpoint_2 step=3 {at_save[1]}", loaded
    assert saving[1] == saving[2] and saving[2].startswith("checkpoint_3 "), saving
    names = sorted(p.name for p in root.iterdir())
    assert names == ["checkpoint_2", "checkpoint_3", live.name], names
    infos = {i.path.name: i.ok for i in list_checkpoints(root)}
    assert infos == {"checkpoint_2": True, "checkpoint_3": True, live.name: False}, infos

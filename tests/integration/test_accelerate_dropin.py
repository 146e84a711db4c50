"""The drop-in promise: a script written for Accelerate runs after replacing ``accelerate``
with ``accel`` in its imports (scripts/accelerate_script.py, unchanged otherwise)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


@pytest.mark.multiprocess
def test_accelerate_script_runs_with_the_one_word_change(scripts, repo, tmp_path, explain):
    source = (scripts / "accelerate_script.py").read_text()
    assert re.search(r"^from accelerate(\.\w+)* import", source, re.M)  # really Accelerate's
    script = tmp_path / "train.py"
    script.write_text(re.sub(r"\baccelerate\b", "accel", source))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):  # 64 shrunk by 10 % per out-of-memory error: ..., 19, 17, 15
        assert f"DROPIN rank={rank} stopped_at=1 batch_size=15" in proc.stdout, explain(proc)
    assert "DROPIN notebook single process" in proc.stdout, explain(proc)
    assert proc.stdout.rstrip().endswith("DROPIN-DONE"), explain(proc)

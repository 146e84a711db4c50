"""Helpers for tests that start real processes through `accel launch`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"


def accel_launch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``accel launch ARGS`` in a subprocess; returns the finished process (text output)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([sys.executable, "-m", "accel_launch", "launch", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def explain(proc: subprocess.CompletedProcess[str], tail: int | None = None) -> str:
    """A finished process's exit code and output, for assertion messages (``tail``: keep
    only that many last characters of stderr)."""
    stderr = proc.stderr[-tail:] if tail else proc.stderr
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{stderr}"


def run_script_here(script: Path, *argv: str) -> None:
    """Run ``script`` as ``__main__`` in the test's own process, as ``python script ARGV``
    would in a one-process launch: the same Accelerator code path without starting the launcher and
    a worker (two interpreters that import torch). Its folder is importable meanwhile; the
    global RNG states it seeds are restored and a process group it leaves is destroyed."""
    import random
    import runpy

    import torch
    import torch.distributed as dist

    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_rng = random.getstate(), torch.random.get_rng_state()
    sys.argv, sys.path[:0] = [str(script), *argv], [str(script.parent)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        random.setstate(saved_rng[0])
        torch.random.set_rng_state(saved_rng[1])
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


@pytest.fixture(scope="session")
def launch():
    return accel_launch


@pytest.fixture
def run_here():
    return run_script_here


@pytest.fixture(name="explain")
def explain_fixture():
    return explain


@pytest.fixture(scope="session")
def scripts() -> Path:
    return SCRIPTS


@pytest.fixture
def repo() -> Path:
    return REPO

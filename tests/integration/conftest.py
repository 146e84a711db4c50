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


@pytest.fixture
def launch():
    return accel_launch


@pytest.fixture(name="explain")
def explain_fixture():
    return explain


@pytest.fixture
def scripts() -> Path:
    return SCRIPTS


@pytest.fixture
def repo() -> Path:
    return REPO

"""Shared helpers for accel-launch's tests: run the real `accel` CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


class Finished:
    """Result of one CLI run: exit code, output and wall time."""

    def __init__(self, proc: subprocess.CompletedProcess[str], seconds: float) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.seconds = seconds

    def __repr__(self) -> str:
        return (f"rc={self.returncode} in {self.seconds:.1f}s\n--- stdout\n{self.stdout}"
                f"\n--- stderr\n{self.stderr}")


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermetic: no config file of the user's (~/.cache/huggingface/accelerate) is read."""
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
    for name in ("ACCEL_CONFIG_FILE", "ACCELERATE_CONFIG_FILE", "SLURM_STEP_NODELIST",
                 "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE",
                 "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run_accel(tmp_path: Path) -> Callable[..., Finished]:
    """``run_accel("launch", "--cpu", ..., cwd=..., timeout=...)``: ``python -m accel_launch``."""

    def run(*argv: str, cwd: Path | None = None, timeout: float = 120) -> Finished:
        # Hermetic: no ACCEL_* or torchrun variables leak in from the test runner.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in _TORCHRUN_VARS}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "accel_launch", *argv],
                              cwd=cwd or tmp_path, env=env, capture_output=True, text=True,
                              timeout=timeout)
        return Finished(proc, time.monotonic() - start)

    return run

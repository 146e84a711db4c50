"""DeepSpeed's JIT-compiled ops (``cpu_adam``, used only by the slow tests, which run with
``ACCEL_RUN_SLOW=1``) build once into one cache every test process shares:
``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``). The fast suite compiles
nothing: the shared-memory all-reduce op is kept out of every launch with
``ACCEL_DEEPSPEED_SHM_COMM=0`` (collectives then use gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXTENSIONS = os.environ.get("TORCH_EXTENSIONS_DIR",
                            str(Path.home() / ".cache" / "torch_extensions"))


def ds_launch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``accel launch ARGS`` with the DeepSpeed test environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONUNBUFFERED="1", ACCEL_DEEPSPEED_SHM_COMM="0",
               TORCH_EXTENSIONS_DIR=EXTENSIONS)
    return subprocess.run([sys.executable, "-m", "accel_launch", "launch", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def ds_launcher():
    pytest.importorskip("deepspeed")
    return ds_launch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (they compile cpu_adam: minutes) run only with ACCEL_RUN_SLOW=1."""
    from accel_state import env

    if env.RUN_SLOW.get_bool():
        return
    skip = pytest.mark.skip(reason=f"slow (compiles DeepSpeed ops): set {env.RUN_SLOW.name}=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

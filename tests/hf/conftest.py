"""The Hugging Face tests: transformers/peft/trl on accel through the `accelerate` shim.

They need the root's `hf` dependency group (synced by default); without it they skip. Every
model, tokenizer and dataset is built locally (scripts/hf_tiny.py): no hub is reached.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
_NEEDED = ("transformers", "peft", "trl", "datasets", "tokenizers", "accelerate")
_MISSING = [name for name in _NEEDED if importlib.util.find_spec(name) is None]

if _MISSING:
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, str(SCRIPTS))  # hf_tiny, as the launched scripts import it

_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub: a test that would fetch anything fails instead."""
    for key, value in _OFFLINE.items():
        monkeypatch.setenv(key, value)


def accel_launch(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``accel launch ARGS`` in a clean environment (no launcher variables leak in)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    env.update(_OFFLINE, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "accel_launch", "launch", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def launch():
    return accel_launch


@pytest.fixture(scope="session")
def scripts() -> Path:
    return SCRIPTS

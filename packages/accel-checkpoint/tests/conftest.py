"""accel-checkpoint's tests: their shared test writers (checkpoint_writers.py) importable by
name. Test folders are not packages (pytest's importlib mode), so this folder goes on
``sys.path``; tests/integration imports the same module from here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

"""``ProjectConfiguration``: where a run keeps its checkpoints and logs, and how many.

Accelerate's fields and behaviour: with ``automatic_checkpoint_naming`` checkpoints go to
``<project_dir>/checkpoints/checkpoint_<iteration>`` and ``iteration`` advances after each
save; ``total_limit`` keeps only the newest ones (accel deletes old ones only *after* the
new one is committed). Loading one continues the numbering after it.
"""

from __future__ import annotations

import os
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from accel_state.errors import ConfigurationError

from accel_checkpoint.hashing import DIGESTS

__all__ = ["ProjectConfiguration", "CHECKPOINT_PATTERN"]

#: Directory names written by automatic naming (``checkpoint_<iteration>``).
CHECKPOINT_PATTERN = r"checkpoint_\d+"


@dataclass
class ProjectConfiguration:
    """Checkpoint and logging locations of a run (``Accelerator(project_config=...)``)."""

    project_dir: str | None = None
    """Base directory of the run: checkpoints go to ``<project_dir>/checkpoints``."""
    _: KW_ONLY
    logging_dir: str | None = None
    """Where trackers write logs; defaults to ``project_dir``."""
    automatic_checkpoint_naming: bool = False
    """Name checkpoints ``checkpoint_<iteration>`` under ``<project_dir>/checkpoints``."""
    total_limit: int | None = None
    """Keep at most this many automatic checkpoints (``None``: keep all)."""
    iteration: int = 0
    """Number of the next automatic checkpoint; advanced by each ``save_state``."""
    save_on_each_node: bool = False
    """Write the shared files on every machine (for storage that is not shared)."""
    checkpoint_digest: str = "xxh3-128"
    """accel only: the digest ``save_state`` records per file and per 16 MiB chunk.
    ``"xxh3-128"`` (fast, catches any accidental damage) or ``"sha256"`` (to compare with
    digests published elsewhere; the save then costs more). Both always load."""

    def __post_init__(self) -> None:
        if self.project_dir is not None:
            self.project_dir = os.fspath(self.project_dir)
        if self.logging_dir is not None:
            self.logging_dir = os.fspath(self.logging_dir)
        if self.total_limit is not None and (not isinstance(self.total_limit, int)
                                             or self.total_limit < 1):
            raise ConfigurationError(
                f"ProjectConfiguration(total_limit={self.total_limit!r}) must be a positive "
                "integer (or None to keep every checkpoint).")
        if self.checkpoint_digest not in DIGESTS:
            raise ConfigurationError(
                f"ProjectConfiguration(checkpoint_digest={self.checkpoint_digest!r}) is not "
                f"a digest accel writes: use one of {list(DIGESTS)}.")
        if not isinstance(self.iteration, int) or self.iteration < 0:
            raise ConfigurationError(f"ProjectConfiguration(iteration={self.iteration!r}) "
                                     "must be a non-negative integer.")
        # automatic naming without a project_dir is checked where the directory is final:
        # Accelerator(project_dir=..., project_config=...) fills it in (Accelerate's usage)
        self.set_directories(self.project_dir)

    def check_automatic_naming(self) -> None:
        """Raise unless automatic checkpoint naming has a project directory to write into."""
        if self.automatic_checkpoint_naming and self.project_dir is None:
            raise ConfigurationError(
                "automatic_checkpoint_naming=True needs a project_dir: pass "
                "Accelerator(project_dir='runs/exp1', ...) or ProjectConfiguration("
                "project_dir='runs/exp1', automatic_checkpoint_naming=True).")

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir`` and default ``logging_dir`` to it (Accelerate's behaviour)."""
        self.project_dir = os.fspath(project_dir) if project_dir is not None else None
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    @property
    def checkpoints_dir(self) -> Path | None:
        """``<project_dir>/checkpoints`` (where automatic checkpoints live)."""
        return Path(self.project_dir) / "checkpoints" if self.project_dir else None

"""Errors of accel-checkpoint, part of accel's one hierarchy (``accel_state.errors``).

``CheckpointError`` subclasses ``RuntimeError`` (a save or load that could not be done);
``CorruptCheckpointError`` also subclasses ``ValueError`` and always names the bad file,
so a caller can tell "this checkpoint is damaged" from "the save failed".
"""

from __future__ import annotations

from accel_state.errors import AccelError

__all__ = ["CheckpointError", "CorruptCheckpointError"]


class CheckpointError(AccelError, RuntimeError):
    """A checkpoint could not be written or read (missing object, unsupported value, ...)."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """A checkpoint is partial or damaged; ``path`` is the file (or directory) at fault."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem

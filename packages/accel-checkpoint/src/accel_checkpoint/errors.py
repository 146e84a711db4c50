"""Errors of accel-checkpoint, part of accel's one hierarchy (``accel_state.errors``).

``CheckpointError`` subclasses ``RuntimeError`` (a save or load that could not be done);
``CorruptCheckpointError`` also subclasses ``ValueError`` and always names the bad file,
so a caller can tell "this checkpoint is damaged" from "the save failed". A missing
checkpoint folder is a ``CheckpointNotFoundError`` (a ``FileNotFoundError``), a save target
holding someone else's files a ``CheckpointExistsError`` (a ``FileExistsError``), and a
target that cannot be written a ``CheckpointWriteError`` (an ``OSError``).
"""

from __future__ import annotations

from accel_state.errors import AccelError

__all__ = ["CheckpointError", "CorruptCheckpointError", "CheckpointNotFoundError",
           "CheckpointExistsError", "CheckpointWriteError"]


class CheckpointError(AccelError, RuntimeError):
    """A checkpoint could not be written or read (missing object, unsupported value, ...)."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """A checkpoint is partial or damaged; ``path`` is the file (or directory) at fault."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # picklable, so it can cross ranks (DCP gathers every rank's failure)
        return type(self), (self.path, self.problem)


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint folder asked for does not exist (``path``: the folder)."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(message)
        self.path = str(path)


class CheckpointExistsError(CheckpointError, FileExistsError):
    """A save's target exists and holds something the save did not write (``path``); the
    message lists it and says what to do. Nothing was written or removed."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(message)
        self.path = str(path)


class CheckpointWriteError(CheckpointError, OSError):
    """A save could not create its files under the target ``path`` (read-only or missing
    parent, a file in the way, no space); ``errno`` is the operating system's."""

    def __init__(self, path: object, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = str(path)
        self.errno = errno

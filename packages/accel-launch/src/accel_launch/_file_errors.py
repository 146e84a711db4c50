"""Errors of CLI commands about files: a ``ConfigurationError`` (the CLI reports it as a
usage error) that is also the ``OSError`` Accelerate's commands raise, so code catching
either works. Kept apart so that importing a command module does not import torch."""

from __future__ import annotations

from accel_state.errors import ConfigurationError

__all__ = ["ConfigFileNotFoundError", "OutputFileExistsError"]


class ConfigFileNotFoundError(ConfigurationError, FileNotFoundError):
    """An input file does not exist (also a ``FileNotFoundError``)."""


class OutputFileExistsError(ConfigurationError, FileExistsError):
    """The output exists and ``--overwrite`` is not set (also a ``FileExistsError``)."""

"""One error hierarchy for every accel package.

Each class also subclasses the builtin a caller would naturally catch
(``ValueError`` for bad configuration, ``ImportError`` for a missing optional
package, ...), so ``except ValueError`` keeps working for code written against
plain PyTorch or Accelerate. Every message names the bad value and the fix.
"""

from __future__ import annotations

__all__ = [
    "AccelError",
    "ConfigurationError",
    "MissingDependencyError",
    "DistributedError",
    "LaunchError",
    "DistributedOperationException",
]


class AccelError(Exception):
    """Base class of every error raised on purpose by accel."""


class ConfigurationError(AccelError, ValueError):
    """A user-supplied value (argument, flag, environment variable, config key) is invalid."""


class MissingDependencyError(AccelError, ImportError):
    """An optional package is needed for what was asked; the message has the install line."""

    def __init__(self, package: str, *, extra: str | None = None, feature: str | None = None,
                 dist: str = "accel") -> None:
        what = f" for {feature}" if feature else ""
        hint = f'pip install "{dist}[{extra}]"' if extra else f"pip install {package}"
        super().__init__(f"The package {package!r} is required{what} but is not installed. "
                         f"Install it with: {hint}")
        self.package = package
        self.extra = extra


class DistributedError(AccelError, RuntimeError):
    """The process group could not be set up or a collective was misused."""


class DistributedOperationException(DistributedError):
    """In debug mode, a collective was called with inputs whose shapes differ across ranks."""


class LaunchError(AccelError, RuntimeError):
    """``accel launch`` could not start or finish the requested processes."""

"""The tracker interface every backend implements, and the main-process gate.

A tracker is built on every process (its constructor only stores arguments and never
imports the backend's SDK); :meth:`GeneralTracker.start` creates the run, on the main
process only unless the tracker sets ``main_process_only = False``. So one job makes
one run, and a script that never calls ``init_trackers`` never imports wandb.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["GeneralTracker", "InitRunTracker", "on_main_process", "is_main_process", "as_number",
           "flatten"]

_F = TypeVar("_F", bound=Callable[..., Any])


def is_main_process() -> bool:
    """Whether this is the global main process (state is created on first use, like Accelerate)."""
    from accel_state.state import PartialState

    return PartialState().is_main_process


def on_main_process(function: _F) -> _F:
    """Decorate a tracker method: run it on the main process only when ``main_process_only``.

    A tracker that sets ``main_process_only = False`` runs the method everywhere.
    """

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", True) and not is_main_process():
            return None
        return function(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class GeneralTracker:
    """Base class of experiment trackers (Accelerate's ``GeneralTracker``).

    Subclasses set the class attributes ``name`` (what ``log_with`` accepts) and
    ``requires_logging_directory`` (whether the constructor takes ``logging_dir`` after
    the run name), and override :meth:`start`, :meth:`store_init_configuration`,
    :meth:`log`, :meth:`finish` and the :attr:`tracker` property. Every hook is a no-op
    here, so a subclass overrides only what its backend supports.
    ``GeneralTracker(_blank=True)`` is a do-nothing tracker (what ``get_tracker`` returns
    when no tracker was started).
    """

    name: str = ""
    requires_logging_directory: bool = False
    main_process_only: bool = True
    #: Import name and distribution of the backend's SDK (availability probe, install hint).
    package: str | None = None
    #: The ``accel-tracking[extra]`` that installs the SDK, or ``None`` for a plain ``pip install``.
    extra: str | None = None

    def __init__(self, _blank: bool = False) -> None:
        if not _blank:
            missing = [attr for attr in ("name", "requires_logging_directory")
                       if not hasattr(type(self), attr)]
            if not getattr(type(self), "name", ""):
                missing.append("name")
            if missing:
                raise NotImplementedError(
                    f"Tracker class {type(self).__name__} does not define {sorted(set(missing))}: "
                    "set them as class attributes (e.g. name = 'my_tracker').")

    @classmethod
    def is_available(cls) -> bool:
        """Whether the backend's SDK is installed (reads metadata; imports nothing)."""
        if cls.package is None:
            return True
        from accel_state.imports import is_package_available

        return is_package_available(cls.package)

    @classmethod
    def require_sdk(cls) -> Any:
        """Import the SDK module, or raise MissingDependencyError with the install line."""
        from accel_state.imports import require

        if cls.package is None:
            raise NotImplementedError(f"{cls.__name__} names no SDK package to import.")
        return require(cls.package, extra=cls.extra, dist="accel-tracking",
                       feature=f"the {cls.name!r} tracker")

    @property
    def tracker(self) -> Any:
        """The backend's own run object (``wandb.Run``, ``SummaryWriter``, ...), else ``None``."""
        return None

    def start(self) -> None:
        """Create the backend's run; called once by ``init_trackers`` (deferred initialisation)."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the hyperparameters of the run."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` (name -> number, or whatever the backend supports) at ``step``."""

    def finish(self) -> None:
        """Close the run and flush what is buffered."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={getattr(self, 'name', '')!r})"


def as_number(value: Any) -> float | int | None:
    """``value`` as a Python number if it is a real scalar (int, float, 0-d tensor or array)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real):
        return value  # type: ignore[return-value]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        result = item()
        if isinstance(result, numbers.Real) and not isinstance(result, complex):
            return result
    return None


def flatten(values: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Nested dicts as one level with ``a/b`` keys (for backends whose params are flat)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name, sep))
        else:
            flat[name] = value
    return flat


def skip_warning(tracker: str, key: str, value: Any, reason: str) -> None:
    """Say (once per key, via the warnings filter) that a value could not be logged."""
    warnings.warn(f"{tracker} tracker: dropped {key!r}, a {type(value).__name__}: {reason}.",
                  stacklevel=3)


class InitRunTracker(GeneralTracker):
    """Backends shaped like wandb: ``sdk.init(project=run_name, **kwargs)`` gives a run;
    ``log`` and ``finish`` go through the SDK module (wandb, SwanLab, Trackio)."""

    requires_logging_directory = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def start(self) -> None:
        self.run = self.require_sdk().init(project=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        config = getattr(self.run, "config", None)
        if config is None:
            config = self.require_sdk().config
        config.update(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.require_sdk().log(values, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        if self.run is not None:
            self.require_sdk().finish()

"""Trackers by name: the ``accel.trackers`` entry-point group and what ``log_with`` accepts.

The built-in trackers register through the package's own entry points, exactly as a
third-party package would, so ``log_with="my_tracker"`` works for both. A class defined
in a script registers with :func:`register_tracker_class`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import Any

from accel_state.enums import BaseEnum
from accel_state.errors import ConfigurationError, MissingDependencyError
from accel_state.registry import Registry

from accel_tracking.base import GeneralTracker

__all__ = ["TRACKERS", "LoggerType", "register_tracker_class", "get_available_trackers",
           "filter_trackers", "tracker_class", "normalize_name"]

#: Every tracker usable by name: built-ins and third parties (entry points), script classes.
TRACKERS: Registry[type[GeneralTracker]] = Registry("accel.trackers", "tracker")


class LoggerType(BaseEnum):
    """The built-in trackers' names (Accelerate's ``LoggerType``); ``ALL``: every installed one."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


def normalize_name(name: str) -> str:
    """``"Comet-ML"`` -> ``"comet_ml"``: names compare case-insensitively, ``-`` as ``_``."""
    return str(name).strip().lower().replace("-", "_")


def register_tracker_class(cls: type[GeneralTracker], name: str | None = None, *,
                           override: bool = False) -> type[GeneralTracker]:
    """Make ``cls`` usable by name in ``log_with`` (also works as a class decorator).

    ``cls`` must set ``name`` (or pass ``name=``) and ``requires_logging_directory``
    itself: the base class's default says nothing about how the class is built. A name
    already taken (a built-in's too) is replaced with Accelerate's warning; ``override=True``
    replaces it silently."""
    if not (isinstance(cls, type) and issubclass(cls, GeneralTracker)):
        raise ConfigurationError(
            f"register_tracker_class needs a GeneralTracker subclass, got {cls!r}: subclass "
            "accel_tracking.GeneralTracker and set its `name`.")
    key = normalize_name(name or getattr(cls, "name", ""))
    if not key or key == LoggerType.ALL:
        raise ConfigurationError(
            f"Tracker class {cls.__name__} needs a name other than {key!r}: set the class "
            "attribute `name` or pass name=... to register_tracker_class.")
    if not any("requires_logging_directory" in vars(k) for k in cls.__mro__
               if k is not GeneralTracker):
        raise ConfigurationError(
            f"Tracker class {cls.__name__} does not set `requires_logging_directory`: set "
            "the class attribute to True if its constructor takes the logging directory "
            "after the run name, else to False.")
    if not override and key in TRACKERS:
        warnings.warn(f"A tracker with the name '{key}' is already registered and will be "
                      f"overwritten by {cls}. This is especially significant when shadowing a "
                      "built-in tracker. (Pass override=True to replace it without this "
                      "warning.)", UserWarning, stacklevel=2)
    TRACKERS.register(key, cls, override=True)
    return cls


def tracker_class(name: str) -> type[GeneralTracker]:
    """The tracker class registered as ``name``; an unknown name lists the available ones."""
    return TRACKERS.get(normalize_name(name))


def get_available_trackers() -> list[str]:
    """Names of the trackers whose SDK is installed (built-ins and registered third parties)."""
    available = []
    for key, cls in sorted(TRACKERS.load_all().items()):
        probe = getattr(cls, "is_available", None)
        if probe is None or probe():
            available.append(key)
    return available


def _missing(cls: type[GeneralTracker]) -> MissingDependencyError:
    return MissingDependencyError(cls.package or cls.name, extra=cls.extra, dist="accel-tracking",
                                  feature=f"log_with={cls.name!r}")


def filter_trackers(log_with: Any, logging_dir: str | os.PathLike[str] | None = None
                    ) -> list[str | GeneralTracker]:
    """Validate ``log_with`` (a name, a tracker, or a list of them; ``"all"``) into a list.

    Names become lower-case registry keys, tracker instances stay as they are. A named
    tracker whose SDK is missing raises MissingDependencyError; one that needs a logging
    directory raises when none is set. ``"all"`` takes every installed tracker and
    leaves out, with a warning, those that would need a logging directory.
    """
    if log_with is None:
        return []
    items: Iterable[Any] = [log_with] if isinstance(log_with, (str, GeneralTracker)) else log_with
    result: list[str | GeneralTracker] = []
    for item in items:
        if isinstance(item, GeneralTracker):
            result.append(item)
            continue
        if isinstance(item, type) and issubclass(item, GeneralTracker):
            register_tracker_class(item, override=True)
            item = item.name
        if not isinstance(item, str):
            raise ConfigurationError(
                f"log_with got {item!r}: give tracker names (e.g. 'tensorboard'), 'all', or "
                "GeneralTracker instances.")
        key = normalize_name(item)
        if key == LoggerType.ALL:
            result.extend(_all_installed(logging_dir, exclude=result))
            continue
        cls = tracker_class(key)
        if not cls.is_available():
            raise _missing(cls)
        if getattr(cls, "requires_logging_directory", False) and logging_dir is None:
            raise ConfigurationError(
                f"The {key!r} tracker writes into a logging directory but none is set: pass "
                "Accelerator(project_dir=...) or project_config=ProjectConfiguration("
                "project_dir=..., logging_dir=...).")
        if key not in result:
            result.append(key)
    return result


def _all_installed(logging_dir: Any, exclude: list[Any]) -> list[str]:
    chosen = []
    for key in get_available_trackers():
        if key in exclude:
            continue
        if getattr(TRACKERS.get(key), "requires_logging_directory", False) and logging_dir is None:
            warnings.warn(f"log_with='all' leaves out the {key!r} tracker: it needs a logging "
                          "directory; pass Accelerator(project_dir=...) to include it.",
                          stacklevel=3)
            continue
        chosen.append(key)
    return chosen

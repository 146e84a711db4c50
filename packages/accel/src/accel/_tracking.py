"""The tracking half of the ``Accelerator``: ``trackers`` / ``init_trackers`` / ``log`` /
``get_tracker`` (:class:`TrackingMixin`), over accel-tracking's registry and group.

``accel.tracking`` (Accelerate's module path) re-exports from here and from accel-tracking.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Protocol

from accel_state.errors import ConfigurationError
from accel_tracking import (
    TRACKERS,
    GeneralTracker,
    TrackerGroup,
    build_trackers,
    filter_trackers,
    register_tracker_class,
)

__all__ = ["TrackingMixin", "LOGGER_TYPE_TO_CLASS", "setup_tracking", "end_tracking",
           "init_trackers"]


class _Tracked(Protocol):
    """What the functions below read and set on an ``Accelerator``: a protocol, not the
    class, since ``accel.accelerator`` imports this module (and no import goes back)."""

    log_with: Any
    _tracker_group: TrackerGroup
    state: Any

class _TrackerTable(MutableMapping[str, type[GeneralTracker]]):
    """Accelerate's name -> tracker class table, as a view of the tracker registry: it holds
    the built-ins, entry-point trackers and classes given to ``register_tracker_class``, and
    writing to it (``table[name] = cls``, ``del``, ``clear``) changes the registry."""

    def __getitem__(self, name: str) -> type[GeneralTracker]:
        if not isinstance(name, str) or name not in TRACKERS:
            raise KeyError(name)
        return TRACKERS.get(name)

    def __setitem__(self, name: str, cls: type[GeneralTracker]) -> None:
        register_tracker_class(cls, name, override=True)

    def __delitem__(self, name: str) -> None:
        if not isinstance(name, str) or name not in TRACKERS:
            raise KeyError(name)
        TRACKERS.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(TRACKERS.load_all())

    def __len__(self) -> int:
        return len(TRACKERS.names())

    def __repr__(self) -> str:
        return f"LOGGER_TYPE_TO_CLASS({dict(self)!r})"


#: Accelerate's name -> tracker class table (a live view of the registry).
LOGGER_TYPE_TO_CLASS: MutableMapping[str, type[GeneralTracker]] = _TrackerTable()


def logging_dir_of(accelerator: _Tracked) -> str | os.PathLike[str] | None:
    """The logging directory from the project configuration (None when no project dir is set)."""
    return getattr(accelerator, "logging_dir", None)


def setup_tracking(accelerator: _Tracked, log_with: Any) -> None:
    """Validate ``log_with`` at construction (unknown names and missing SDKs fail early)."""
    accelerator.log_with = filter_trackers(log_with, logging_dir_of(accelerator))
    accelerator._tracker_group = _group(accelerator, [], strict=None)


def _group(accelerator: _Tracked, trackers: list[GeneralTracker],
           strict: bool | None) -> TrackerGroup:
    # a partial of a module function, not a lambda: a pickled Accelerator carries its group.
    # It holds the accelerator's state (what accelerator.is_main_process reads), not the
    # accelerator: a group pointing back at its accelerator would make a reference cycle,
    # and an Accelerator dropped by its last user would wait for gc.collect() to be freed.
    return TrackerGroup(trackers, strict=strict,
                        is_main_process=functools.partial(_is_main_process, accelerator.state))


def _is_main_process(state: Any) -> bool:
    return state.is_main_process


def init_trackers(accelerator: _Tracked, project_name: str,
                  config: Mapping[str, Any] | None = None,
                  init_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
                  strict: bool | None = None) -> None:
    """Build the trackers of ``log_with``, start them (main process) and store ``config``."""
    current = accelerator._tracker_group
    if current.trackers and not current.finished:
        raise ConfigurationError(
            "init_trackers() was already called for this Accelerator: one run per job. Call "
            "end_training() first to finish the current run before starting another.")
    trackers = build_trackers(accelerator.log_with, project_name,
                              logging_dir_of(accelerator), init_kwargs)
    group = _group(accelerator, trackers, strict)
    accelerator._tracker_group = group
    group.start(None if config is None else dict(config))


def end_tracking(accelerator: _Tracked) -> None:
    """Finish every tracker once (they stay in ``trackers``); ``init_trackers`` may start anew."""
    accelerator._tracker_group.finish()


class TrackingMixin:
    """The experiment-tracking methods of :class:`~accel.Accelerator`."""

    @property
    def trackers(self) -> list[Any]:
        """The trackers of the current run (built by :meth:`init_trackers`)."""
        return self._tracker_group.trackers

    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, dict[str, Any]] | None = None, *,
                      strict: bool | None = None) -> None:
        """Start one run per tracker of ``log_with`` (on the main process) and store ``config``.

        ``init_kwargs`` maps a tracker name to its constructor's kwargs; ``strict=True`` (or
        ``ACCEL_TRACKING_STRICT=1``) makes a failing tracker an error instead of a warning.
        """
        init_trackers(self, project_name, config, init_kwargs, strict=strict)  # type: ignore[arg-type]

    def log(self, values: dict[str, Any], step: int | None = None,
            log_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Log ``values`` to every tracker (main process unless a tracker says otherwise)."""
        self._tracker_group.log(values, step=step, log_kwargs=log_kwargs)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name``; with ``unwrap``, the backend's own run object."""
        return self._tracker_group.get(name, unwrap=unwrap)

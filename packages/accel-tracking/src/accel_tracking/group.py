"""The trackers of one run, called together, with the failure policy.

A tracker is a side channel: when its backend fails (network down, bad credentials,
full disk) training must go on. So every call into a tracker goes through
:meth:`TrackerGroup._call`: the first failure of a tracker warns (naming the tracker, the
hook and the error, and saying that training continues), later ones are counted, and
:meth:`TrackerGroup.finish` sums them up. A tracker whose ``start`` failed has no run and
is skipped from then on. Strict mode (``strict=True`` or ``ACCEL_TRACKING_STRICT=1``)
re-raises the backend's own exception instead. Errors accel raises on purpose
(a missing SDK, a bad argument) always propagate: they are the user's to fix.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_state import env
from accel_state.errors import AccelError, ConfigurationError

from accel_tracking.base import GeneralTracker, is_main_process
from accel_tracking.registry import normalize_name, tracker_class

__all__ = ["TrackerGroup", "TrackerFailureWarning", "build_trackers"]


class TrackerFailureWarning(UserWarning):
    """A tracker's backend raised; training continued without that call."""


@dataclass
class _Failures:
    first: BaseException
    hook: str
    count: int = 0
    disabled: bool = False
    hooks: dict[str, int] = field(default_factory=dict)


def build_trackers(log_with: Iterable[str | GeneralTracker], project_name: str,
                   logging_dir: str | os.PathLike[str] | None = None,
                   init_kwargs: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> list[GeneralTracker]:
    """Construct the trackers named in ``log_with`` (instances are kept as they are).

    ``init_kwargs`` maps a tracker name to the keyword arguments of its constructor
    (``{"wandb": {"entity": "me"}}``); trackers that need a logging directory get
    ``logging_dir`` after the project name.
    """
    init_kwargs = {normalize_name(k): v for k, v in (init_kwargs or {}).items()}
    trackers: list[GeneralTracker] = []
    for item in log_with:
        if isinstance(item, GeneralTracker):
            trackers.append(item)
            continue
        cls = tracker_class(item)
        kwargs = dict(init_kwargs.get(normalize_name(item), {}))
        if cls.requires_logging_directory:
            if logging_dir is None:
                raise ConfigurationError(
                    f"The {item!r} tracker needs a logging directory: pass "
                    "Accelerator(project_dir=...) (or logging_dir to its constructor).")
            trackers.append(cls(project_name, logging_dir, **kwargs))
        else:
            trackers.append(cls(project_name, **kwargs))
    unknown = set(init_kwargs) - {normalize_name(getattr(t, "name", "")) for t in trackers}
    if unknown:
        warnings.warn(f"init_kwargs names {sorted(unknown)} but no such tracker is in log_with "
                      f"({[getattr(t, 'name', t) for t in trackers]}); those kwargs are unused.",
                      stacklevel=3)
    return trackers


class TrackerGroup:
    """Several trackers driven as one, main-process gated, with the failure policy.

    Args:
        trackers: the trackers (built, not started).
        strict: re-raise a tracker's failure instead of warning; ``None`` reads
            ``ACCEL_TRACKING_STRICT`` (default off).
        is_main_process: a callable saying whether this is the main process (default:
            ``PartialState().is_main_process``).
    """

    def __init__(self, trackers: Iterable[GeneralTracker] = (), *, strict: bool | None = None,
                 is_main_process: Callable[[], bool] | None = None) -> None:
        self.trackers: list[GeneralTracker] = list(trackers)
        self.strict = env.TRACKING_STRICT.get_bool(False) if strict is None else bool(strict)
        self._is_main = is_main_process or _default_is_main
        self._failures: dict[int, _Failures] = {}
        self.finished = False
        self._warned_after_finish = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, config: Mapping[str, Any] | None = None) -> None:
        """Start every tracker that runs here, then store ``config`` in each."""
        for tracker in self.trackers:
            self._call(tracker, "start")
        if config is not None:
            for tracker in self.trackers:
                self._call(tracker, "store_init_configuration", dict(config))

    def log(self, values: Mapping[str, Any], step: int | None = None,
            log_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Log ``values`` to every tracker; ``log_kwargs`` maps a tracker name to extra kwargs."""
        if self._after_finish("log"):
            return
        log_kwargs = {normalize_name(k): v for k, v in (log_kwargs or {}).items()}
        for tracker in self.trackers:
            extra = log_kwargs.get(normalize_name(getattr(tracker, "name", "")), {})
            self._call(tracker, "log", values, step=step, **extra)

    def call(self, hook: str, *args: Any, only: str | None = None, **kwargs: Any) -> None:
        """Call ``hook`` (``log_images``, ``log_table``, ...) on the trackers that have it."""
        if self._after_finish(hook):
            return
        for tracker in self.trackers:
            if only is not None and normalize_name(tracker.name) != normalize_name(only):
                continue
            if callable(getattr(tracker, hook, None)):
                self._call(tracker, hook, *args, **kwargs)

    def finish(self) -> None:
        """Finish every tracker once, then summarise the failures seen during the run."""
        if self.finished:
            return
        self.finished = True
        for tracker in self.trackers:
            self._call(tracker, "finish")
        self._summarise()

    def get(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (or its raw run object with ``unwrap``)."""
        key = normalize_name(name)
        for tracker in self.trackers:
            if normalize_name(getattr(tracker, "name", "")) == key:
                return tracker.tracker if unwrap else tracker
        if not self.trackers:
            return GeneralTracker(_blank=True)
        names = [getattr(t, "name", "?") for t in self.trackers]
        raise ConfigurationError(f"{name!r} is not one of the trackers of this run ({names}): "
                                 "add it to log_with before init_trackers.")

    def failures(self) -> dict[str, int]:
        """Failed calls per tracker name so far (what :meth:`finish` reports)."""
        by_id = {id(t): getattr(t, "name", "?") for t in self.trackers}
        return {by_id.get(k, "?"): f.count for k, f in self._failures.items()}

    def __iter__(self) -> Any:
        return iter(self.trackers)

    def __len__(self) -> int:
        return len(self.trackers)

    # -- the failure policy -----------------------------------------------------------------
    def _after_finish(self, hook: str) -> bool:
        if self.finished and self.trackers and not self._warned_after_finish:
            self._warned_after_finish = True
            warnings.warn(f"{hook}() after end_training() is ignored: the trackers' runs are "
                          "finished. Call init_trackers() again to start a new run.",
                          TrackerFailureWarning, stacklevel=4)
        return self.finished

    def _runs_here(self, tracker: GeneralTracker) -> bool:
        return not getattr(tracker, "main_process_only", True) or self._is_main()

    def _call(self, tracker: GeneralTracker, hook: str, *args: Any, **kwargs: Any) -> Any:
        if not self._runs_here(tracker):
            return None
        record = self._failures.get(id(tracker))
        if record is not None and record.disabled:
            return None
        try:
            return getattr(tracker, hook)(*args, **kwargs)
        except AccelError:
            raise
        except Exception as error:
            if self.strict:
                name = getattr(tracker, "name", "?")
                _note(error, f"raised by the {name!r} tracker in {hook}(); tracker "
                      "failures are errors because strict tracking is on (strict=True or "
                      "ACCEL_TRACKING_STRICT=1)")
                raise
            self._record(tracker, hook, error)
            return None

    def _record(self, tracker: GeneralTracker, hook: str, error: Exception) -> None:
        name = getattr(tracker, "name", type(tracker).__name__)
        record = self._failures.get(id(tracker))
        if record is None:
            record = self._failures[id(tracker)] = _Failures(first=error, hook=hook)
            record.disabled = hook == "start"
            then = ("it has no run, so it is skipped for the rest of training"
                    if record.disabled else "it keeps being called; later failures are counted "
                    "and reported when training ends")
            warnings.warn(
                f"Tracker {name!r} failed in {hook}(): {type(error).__name__}: {error}. "
                f"Training continues without it: {then}. Set ACCEL_TRACKING_STRICT=1 (or "
                "init_trackers(..., strict=True)) to make tracker failures errors.",
                TrackerFailureWarning, stacklevel=4)
        record.count += 1
        record.hooks[hook] = record.hooks.get(hook, 0) + 1

    def _summarise(self) -> None:
        for tracker in self.trackers:
            record = self._failures.get(id(tracker))
            if record is None or record.count <= 1:
                continue
            hooks = ", ".join(f"{h}() x{n}" for h, n in record.hooks.items())
            warnings.warn(
                f"Tracker {getattr(tracker, 'name', '?')!r} failed {record.count} times during "
                f"this run ({hooks}); "
                f"first error in {record.hook}(): {type(record.first).__name__}: {record.first}.",
                TrackerFailureWarning, stacklevel=3)


def _default_is_main() -> bool:
    return is_main_process()


def _note(error: BaseException, text: str) -> None:
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(text)

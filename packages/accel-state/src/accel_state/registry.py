"""Named plug-ins loaded from entry-point groups (``accel.strategies``, ``accel.trackers``, ...).

Built-ins register through the same entry points as third parties, so every name a
user can pass is discoverable in one place. Entry points are loaded lazily, on the
first lookup, so importing a package stays cheap.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import warnings
from collections.abc import Iterator
from typing import Generic, TypeVar

from accel_state.errors import ConfigurationError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object table for one kind of plug-in, filled from ``group`` on first use."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self._items: dict[str, T] = {}
        self._entry_points: dict[str, importlib.metadata.EntryPoint] | None = None

    def register(self, name: str, obj: T, *, override: bool = False) -> T:
        """Add ``obj`` under ``name``; re-registering a different object needs ``override``."""
        key = name.lower()
        if key in self._items and self._items[key] is not obj and not override:
            raise ConfigurationError(
                f"A {self.kind} named {name!r} is already registered; pass override=True to "
                "replace it or pick another name."
            )
        self._items[key] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Forget ``name``, registered or from an entry point (unknown names are ignored)."""
        key = name.lower()
        self._items.pop(key, None)
        self._discover().pop(key, None)

    def _discover(self) -> dict[str, importlib.metadata.EntryPoint]:
        if self._entry_points is None:
            found = importlib.metadata.entry_points(group=self.group)
            self._entry_points = {ep.name.lower(): ep for ep in found}
        return self._entry_points

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name lists the known ones."""
        key = name.lower()
        if key not in self._items:
            entry_point = self._discover().get(key)
            if entry_point is None:
                raise ConfigurationError(self._unknown_message(name))
            self._items[key] = entry_point.load()
        return self._items[key]

    def _unknown_message(self, name: str) -> str:
        known = self.names()
        close = difflib.get_close_matches(name.lower(), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return (f"Unknown {self.kind} {name!r}.{hint} Available: {', '.join(known) or 'none'}. "
                f"Third-party {self.kind}s register through the {self.group!r} entry-point group.")

    def names(self) -> list[str]:
        return sorted(set(self._items) | set(self._discover()))

    def load_all(self) -> dict[str, T]:
        """Load every entry point; one that fails to load is skipped with a warning."""
        for key in self.names():
            if key in self._items:
                continue
            try:
                self.get(key)
            except Exception as error:  # a broken plug-in must not break the others
                warnings.warn(f"Could not load {self.kind} {key!r} from {self.group!r}: {error}",
                              stacklevel=2)
        return dict(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {self.names()})"

    def _clear(self) -> None:
        """Forget registrations and re-read entry points next time (tests)."""
        self._items.clear()
        self._entry_points = None


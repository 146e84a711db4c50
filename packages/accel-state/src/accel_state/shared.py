"""Storage of the borg singletons' attributes (``PartialState``, ``GradientState`` and the
facade's ``AcceleratorState``): every instance of one class shares one such ``__dict__``."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["SharedDict", "ThreadLocalSharedDict"]


#: Storage of a borg singleton's attributes, shared by every instance: the plain ``dict``
#: (as in Accelerate off XLA). Not a subclass: CPython specialises attribute reads and
#: writes only on an exact dict, and ``GradientState``'s are read on every micro-step.
SharedDict = dict


class ThreadLocalSharedDict(threading.local):
    """Per-thread storage (Accelerate uses it under torch_xla); kept for API compatibility."""

    def __init__(self) -> None:
        self._storage: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._storage.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self._storage[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._storage[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self._storage

    def clear(self) -> None:
        self._storage.clear()

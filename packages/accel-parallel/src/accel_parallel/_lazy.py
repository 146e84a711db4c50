"""Package names that load on first use (PEP 562): importing a package, or any module in it,
does not import every module the package re-exports (DeepSpeed's modules stay unloaded at
``import accel``, and a backend's modules can import each other without a cycle through
their package)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names`` maps each exported name to the
    module that defines it; the value is imported on first access and kept in the package."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__

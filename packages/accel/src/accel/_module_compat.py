"""Module-level attribute forwarding for Accelerate's module paths.

Scripts written for Accelerate import helper names from the module that happened to use
them (``from accelerate.accelerator import DataLoaderConfiguration``) and tests patch them
there (``mock.patch("accelerate.accelerator.is_xpu_available")``). A shell module built with
:func:`forward_to` answers such names with the very same objects of the public modules it
names, imported only when first asked for, so the module itself stays free of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def forward_to(module_name: str, *sources: str) -> Callable[[str], Any]:
    """A PEP 562 ``__getattr__`` for ``module_name`` that looks ``name`` up in ``sources``,
    in order (each a public accel module path), and raises AttributeError like a module."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):  # private and dunder probes (``__path__``) stay misses
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        for source in sources:
            module = importlib.import_module(source)
            if name in getattr(module, "__all__", ()) or name in vars(module):
                return getattr(module, name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__

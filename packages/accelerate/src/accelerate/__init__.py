"""accel's compatibility shim for the ``accelerate`` import name. This is NOT Hugging Face
Accelerate.

Libraries built on Accelerate (transformers, peft, trl) ``import accelerate`` and read its
version. Installing this distribution lets them run on accel unchanged:

* ``import accelerate.X`` (any depth) gives the very module object ``accel.X``: the names,
  and whatever a test patches (``mock.patch("accelerate.utils.x")`` patches ``accel.utils``),
  are accel's. A path accel does not have fails as a missing module would.
* ``accelerate.<name>`` answers ``accel.<name>``; only ``__version__`` is the shim's own: the
  Accelerate release whose behaviour accel matches, with a local label (``+accel.N``) that
  says what it is. Libraries that branch on Accelerate's version take their current path.

Nothing happens unless this distribution is installed and ``accelerate`` is imported:
``import accel`` never loads it. It refuses to run next to a real Accelerate (two
``accelerate`` distributions visible), naming both, because which files Python would pick
is then an accident of the path order.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from types import ModuleType
from typing import Any

__version__ = "1.15.0+accel.1"

#: The start of this distribution's Summary: how a shim is told from a real Accelerate.
_SHIM_SUMMARY = "accel's compatibility shim"
_TARGET = "accel"


def _real_accelerates() -> list[str]:
    """``"<version> in <folder>"`` for each visible ``accelerate`` distribution but the shim."""
    found = []
    for dist in importlib.metadata.distributions(name=__name__):
        if not (dist.metadata["Summary"] or "").startswith(_SHIM_SUMMARY):
            found.append(f"{dist.version} in {dist.locate_file('')}")
    return found


def _refuse_a_real_accelerate() -> None:
    real = _real_accelerates()
    if real:
        raise ImportError(
            f"both accel's `accelerate` shim ({__file__}) and Hugging Face Accelerate "
            f"({'; '.join(real)}) are installed in this environment: `import accelerate` would "
            "mix their files. Keep one: `pip uninstall -y accelerate` (repeat until "
            "`pip show accelerate` finds none), then reinstall either the shim (to run on accel) "
            "or `pip install accelerate` (to run on Hugging Face Accelerate).")


class _AliasLoader(importlib.abc.Loader):
    """Loads ``accelerate.X`` by importing ``accel.X`` and putting that very module in
    ``sys.modules`` under the alias (the import system returns what ``sys.modules`` holds)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a throwaway module; ``exec_module`` replaces it

    def exec_module(self, module: ModuleType) -> None:
        alias = module.__name__
        sys.modules[alias] = importlib.import_module(self.target)
        # Alias the target's already-loaded submodules too, so that a later
        # ``import accelerate.utils.tqdm`` finds it in ``sys.modules``. Loading it afresh
        # would make the import system bind the submodule onto its parent, i.e. overwrite
        # ``accel.utils.tqdm`` (the function) with the module ``accel.utils.tqdm``.
        inner = self.target + "."
        for name, loaded in list(sys.modules.items()):
            if name.startswith(inner):
                sys.modules.setdefault(alias + name[len(self.target):], loaded)


class _AliasFinder:
    """A meta path finder that maps ``accelerate.X`` to ``accel.X`` (any depth)."""

    prefix = __name__ + "."

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefix):
            return None
        home = _TARGET + fullname[len(__name__):]
        try:
            found = importlib.util.find_spec(home)
        except ImportError:
            found = None
        if found is None:
            return None  # the usual "No module named 'accelerate.X'"
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(home))


def __getattr__(name: str) -> Any:
    if name.startswith("_") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(_TARGET), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} "
                             f"(accel's shim: {_TARGET!r} has none either)") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *dir(importlib.import_module(_TARGET))})


_refuse_a_real_accelerate()
if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

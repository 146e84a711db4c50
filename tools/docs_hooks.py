"""mkdocs hooks for the docs site (named in mkdocs.yml under ``hooks:``).

``<!-- api: MODULE -->`` in a page becomes that module's API reference, built from its
``__all__``: the names defined in its package are rendered from their docstrings by
mkdocstrings (a ``::: MODULE`` block listing them), and the names it re-exports from another
package become a table linking to their home page. mkdocstrings alone cannot do this: it
drops names re-exported from another package, and ``accel`` and ``accel_checkpoint`` build
``__all__`` from a dict (lazy loading, PEP 562) that static analysis cannot read.

Where names come from is read statically with griffe (mkdocstrings' own loader), so the
build imports no torch; only a lazy package's ``__all__`` is read by importing the package,
which is cheap by design.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import griffe

_API = re.compile(r"^<!-- api: ([a-z_.]+) -->$", re.M)
_REPO = Path(__file__).resolve().parents[1]
_LOADER = griffe.GriffeLoader(
    search_paths=[str(p) for p in sorted(_REPO.glob("packages/*/src"))])
_OURS = {p.name for p in _REPO.glob("packages/*/src/*") if (p / "__init__.py").is_file()}


_PACKAGES: dict[str, Any] = {}


def _get(path: str) -> Any:
    """The griffe object at a dotted ``path`` inside one of our packages, else None."""
    top, _, rest = path.partition(".")
    if top not in _OURS:
        return None
    try:
        if top not in _PACKAGES:
            _PACKAGES[top] = _LOADER.load(top)
        return _PACKAGES[top][rest] if rest else _PACKAGES[top]
    except (KeyError, griffe.GriffeError):
        return None


def _home(module: Any, name: str) -> str:
    """The module that defines ``module.name``, following re-exports (``from x import y``
    and a lazy package's ``_EXPORTS`` table) without importing anything."""
    obj = module.members.get(name)
    if obj is None:  # a lazy package: the name is loaded from _EXPORTS[name] on first use
        exports = getattr(importlib.import_module(module.path), "_EXPORTS", {})
        target = f"{exports[name]}.{name}" if name in exports else f"{module.path}.{name}"
        obj = _get(target)
        if obj is None:
            return target.rpartition(".")[0]
    for _ in range(20):  # alias chains are short; the bound only guards against a cycle
        if not obj.is_alias:
            return obj.path if obj.is_module else obj.module.path
        target = obj.target_path
        resolved = _get(target)
        if resolved is None:
            return target.rpartition(".")[0]
        obj = resolved
    return module.path


def _public_names(module: Any) -> list[str]:
    exports = module.exports
    if exports and all(isinstance(e, str) for e in exports):
        return list(dict.fromkeys(exports))
    names = getattr(importlib.import_module(module.path), "__all__", None)
    if not names:
        raise ValueError(f"{module.path} has no __all__: list its public names there")
    return list(names)


def api_block(module_name: str) -> str:
    """The Markdown of one module's API reference (see the module docstring)."""
    module = _get(module_name)
    if module is None:
        raise ValueError(f"<!-- api: {module_name} -->: no such accel module")
    top = module_name.split(".")[0]
    names = _public_names(module)
    homes = {name: _home(module, name) for name in names}
    own = [n for n in names if homes[n].split(".")[0] == top]
    foreign = [n for n in names if n not in own]
    lines = [f"::: {module_name}", "    options:", "      show_root_toc_entry: false",
             f"      members: [{', '.join(own)}]", ""]
    if foreign:
        lines += [f"Also importable from `{module_name}` (documented in their home package):",
                  "", "| name | defined in |", "|---|---|"]
        for name in sorted(foreign, key=str.lower):
            page = homes[name].split(".")[0]
            where = f"[`{homes[name]}`]({page}.md)" if page in _OURS else f"`{homes[name]}`"
            lines.append(f"| `{name}` | {where} |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return _API.sub(lambda m: api_block(m.group(1)), markdown)

"""Write Accelerate 1.15's public names, module by module, as JSON data for the drop-in test.

``tests/packaging/test_accelerate_names.py`` checks that every name listed here imports
from the ``accel.`` module of the same path. The data file is committed, so the test needs
no Accelerate; rerun this script (with the real Accelerate first on ``PYTHONPATH``) to
refresh it::

    pip install --no-deps --target /tmp/real_accelerate accelerate==1.15.0
    PYTHONPATH=/tmp/real_accelerate .venv/bin/python tools/accelerate_names.py

Which names are public. No Accelerate module defines ``__all__`` (where one does, it is
used as is). Otherwise a module's public names are its top-level bindings that do not
start with ``_``, read from its source (also inside top-level ``if``/``try`` blocks, not
inside ``if TYPE_CHECKING:``): ``def``, ``class``, assignments, and imports *from
Accelerate itself* (relative or ``accelerate.``), because ``accelerate.utils`` and friends
are re-export modules whose API is what they import. Imports of other packages
(``torch``, ``typing.Optional``) are not Accelerate's API and are left out, as are names
bound to modules (each submodule has its own entry) and module-level loggers. A name
declared in the source but absent after import (it sits behind an optional dependency
such as Megatron-LM, or another OS) is listed under ``conditional``.

Modules skipped: ``accelerate.test_utils.scripts.*`` (scripts a launcher runs, not an
import API). A module that fails to import here is recorded under ``unimportable`` with
the error.

The file also records ``accelerate launch``'s options (``launch_command_parser``: each
option's spellings and help group) and the ``accelerate`` CLI's subcommands.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import logging
import pkgutil
import sys
import types
from pathlib import Path

EXPECTED_VERSION = "1.15.0"
DEFAULT_OUT = (Path(__file__).resolve().parents[1]
               / "tests" / "packaging" / "data" / "accelerate_1_15_names.json")
SKIP_PREFIXES = ("accelerate.test_utils.scripts",)


def _own_import(node: ast.ImportFrom) -> bool:
    """Whether a ``from X import y`` re-exports Accelerate's own names."""
    return node.level > 0 or (node.module or "").split(".")[0] == "accelerate"


def _bindings(body: list[ast.stmt]) -> list[str]:
    """Top-level names a module body binds (descending into if/try/with, not functions)."""
    names: list[str] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            if isinstance(node.target, ast.Name):
                names.append(node.target.id)
        elif isinstance(node, ast.ImportFrom) and _own_import(node):
            names += [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.If):
            if _is_main_guard(node) or _is_type_checking(node):
                continue
            names += _bindings(node.body) + _bindings(node.orelse)
        elif isinstance(node, ast.Try):
            names += _bindings(node.body) + _bindings(node.orelse) + _bindings(node.finalbody)
            for handler in node.handlers:
                names += _bindings(handler.body)
        elif isinstance(node, ast.With):
            names += _bindings(node.body)
    return names


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__")


def _is_type_checking(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` blocks bind nothing at run time."""
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _is_logger(value: object) -> bool:
    return isinstance(value, (logging.Logger, logging.LoggerAdapter))


def module_names(module: types.ModuleType) -> dict[str, list[str]]:
    """``names`` present after import and ``conditional`` ones (declared, absent here)."""
    if hasattr(module, "__all__"):
        return {"names": sorted(module.__all__), "conditional": []}
    source = inspect.getsource(module)
    declared = {n for n in _bindings(ast.parse(source).body) if not n.startswith("_")}
    present, conditional = [], []
    for name in sorted(declared):
        if not hasattr(module, name):
            conditional.append(name)
            continue
        value = getattr(module, name)
        if isinstance(value, types.ModuleType) or _is_logger(value):
            continue
        present.append(name)
    return {"names": present, "conditional": conditional}


def walk(package: types.ModuleType) -> tuple[dict[str, dict], dict[str, str]]:
    """Every module of ``package``: name data, and the modules that failed to import."""
    found: dict[str, dict] = {package.__name__: module_names(package)}
    failed: dict[str, str] = {}
    for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
        name = info.name
        if any(name.startswith(p) for p in SKIP_PREFIXES):
            continue
        if any(part.startswith("_") for part in name.split(".")):
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - recorded with its reason
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        found[name] = module_names(module)
    return found, failed


def launch_flags() -> list[dict]:
    """``accelerate launch``'s options: each one's spellings and the title of its help group."""
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    flags = []
    for group in parser._action_groups:
        for action in group._group_actions:
            if action.option_strings and action.dest != "help":
                flags.append({"options": list(action.option_strings), "group": group.title})
    return sorted(flags, key=lambda f: f["options"][0])


def cli_commands() -> list[str]:
    """The ``accelerate`` CLI's subcommands."""
    from accelerate.commands import accelerate_cli

    source = inspect.getsource(accelerate_cli)
    parser = argparse.ArgumentParser("accelerate", allow_abbrev=False)
    subparsers = parser.add_subparsers()
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "").endswith("_parser"):
            names.append(node.func.id)
    for factory in sorted(set(names)):
        getattr(accelerate_cli, factory)(subparsers=subparsers)
    return sorted(subparsers.choices)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    import accelerate

    if accelerate.__version__ != EXPECTED_VERSION or "accel" in Path(
            accelerate.__file__).parts[-3:-1]:
        sys.exit(f"found accelerate {accelerate.__version__} at {accelerate.__file__}; put the "
                 f"real accelerate=={EXPECTED_VERSION} first on PYTHONPATH (see the docstring)")
    modules, failed = walk(accelerate)
    data = {
        "accelerate_version": accelerate.__version__,
        "rule": "see tools/accelerate_names.py's docstring",
        "modules": modules,
        "unimportable": failed,
        "launch_flags": launch_flags(),
        "cli_commands": cli_commands(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    total = sum(len(m["names"]) for m in modules.values())
    print(f"{len(modules)} modules, {total} names, {len(data['launch_flags'])} launch flags, "
          f"{len(failed)} unimportable -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

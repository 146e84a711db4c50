"""The facade has no import circle and stays cheap to import.

A circle between two facade modules (the issue found ``tracking.py`` importing
``accelerator.py`` back) makes the import order matter: importing the "wrong" one first
fails or sees a half-initialised module. The static check reads every module of
``packages/accel/src/accel`` and follows the imports executed at import time (module level,
not under ``TYPE_CHECKING``, not inside functions); the runtime checks import the modules
the issue named first, in fresh interpreters. The import-cost check pins what
``from accel import Accelerator`` may load: Accelerate's module paths are for scripts that
ask for them, and are never paid for by the Accelerator itself (the time is measured by
tools/bench/bench_import.py).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "packages" / "accel" / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _eager_imports(tree: ast.Module, package: str, modules: set[str]) -> set[str]:
    """Facade modules imported while ``tree`` executes (statements at module level,
    including inside try/if blocks other than ``if TYPE_CHECKING``)."""
    found: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If):
            if not _is_type_checking(node):
                todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                todo += handler.body
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from accel import _tracking`
    return {name for name in found if name in modules}


def facade_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _eager_imports(ast.parse(path.read_text()), package, set(files)) - {name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_checker_finds_a_circle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import accel.x\n"
                     "from accel import y\ndef f():\n    import accel.z\n")
    assert _eager_imports(tree, "accel", {"accel.x", "accel.y", "accel.z"}) == {"accel.y"}


def test_facade_has_no_import_circle():
    graph = facade_graph()
    assert "accel.accelerator" in graph and graph["accel.accelerator"]  # the graph is real
    assert "accel.accelerator" not in graph["accel.tracking"] | graph["accel._tracking"]
    assert find_cycles(graph) == []


@pytest.mark.parametrize("first", ["accel.tracking", "accel._tracking", "accel.utils"])
def test_a_facade_module_imports_first_in_a_fresh_interpreter(first):
    code = f"import {first}\nfrom accel import Accelerator\nprint('IMPORTED')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "IMPORTED" in result.stdout, result.stderr[-3000:]


#: What ``from accel import Accelerator`` must not load: the Accelerate path shells, the CLI,
#: big-model inference and what only they need.
_NOT_FOR_THE_ACCELERATOR = ("accel.utils", "accel.commands", "accel.big_modeling", "accel.hooks",
                            "accel.state", "accel.logging", "accel_launch", "accel_inference.hooks",
                            "accel_checkpoint.fsdp_io", "yaml")


def test_from_accel_import_accelerator_loads_no_module_path_shell():
    code = ("import json, sys\nfrom accel import Accelerator\n"
            "print(json.dumps(sorted(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = set(json.loads(result.stdout.splitlines()[-1]))
    assert "accel.accelerator" in loaded
    assert sorted(loaded & set(_NOT_FOR_THE_ACCELERATOR)) == []

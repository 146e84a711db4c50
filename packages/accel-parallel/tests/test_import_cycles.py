"""No module of accel-parallel imports, directly or through others, a module that imports it
back: at the top, inside a function or under ``TYPE_CHECKING`` alike (a lazy import only
hides a cycle; it still means neither module can be read, moved or tested without the
other). Issue 26 broke deepspeed.config <-> deepspeed.plugin, mesh.tensor_parallel <->
mesh.tp_plan, deepspeed.strategy <-> deepspeed.checkpoint, mesh.device_mesh <->
mesh.parallelism_config and selection <-> strategy (named by their modules since the
backends got subpackages: a subpackage's ``__init__`` loads its names lazily and no module
imports its own package, so the packages add no cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import accel_parallel

ROOT = Path(accel_parallel.__file__).parent

#: Cycles known and not yet broken, each with why; any other cycle fails the test. (The
#: Ulysses modules' one is broken: ulysses and ulysses_hf import nothing of the others,
#: sequence_parallel imports them and holds apply_ulysses, and no longer names
#: ParallelismConfig under TYPE_CHECKING.)
KNOWN: list[frozenset[str]] = []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the accel_parallel modules it imports anywhere in its text (the package
    ``__init__`` only re-exports and is left out: every module is reached through it)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[:len(package) - node.level + 1],
                                     *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t not in (name, "accel_parallel")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_detector_finds_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_accel_parallel_has_no_import_cycle():
    graph = import_graph()
    assert "accel_parallel.deepspeed.checkpoint" in graph and graph["accel_parallel.mesh.strategy"]
    new = [sorted(c) for c in cycles(graph) if c not in KNOWN]
    assert not new, f"import cycles: {new}"

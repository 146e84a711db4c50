#!/usr/bin/env python3
"""Enforce the package layers of DESIGN.md §3 and that every import is a declared dependency.

Why: each accel package must install and work on its own (``pip install accel-data`` pulls
only accel-state and torch). That holds only if no package imports a sibling or a higher
layer, and if every import a package makes at import time is in its ``pyproject.toml``.
The per-package CI runs catch a broken package late and one at a time; this check reads
the source statically (``ast``, stdlib only, well under a second) and names every
offending line at once.

Three checks, over every ``.py`` file under ``packages/*/src/``:

1. Layers: an import of another internal package (``import``/``from`` statements anywhere,
   including inside functions and ``TYPE_CHECKING`` blocks, string literals passed to
   ``importlib.import_module``/``__import__``, and internal module paths written as dict
   values, the lazy-import tables of PEP 562 facades) must be allowed by :data:`ALLOWED`.
2. Declarations: an imported internal package must be a dependency of the importing
   member (``[project].dependencies``; a lazy import may instead be declared in
   ``[project.optional-dependencies]``). A third-party import executed at module level
   must be the stdlib or in ``[project].dependencies``; imports inside functions or under
   ``try``/``TYPE_CHECKING`` are optional dependencies and are allowed.
3. Cycles: no module of a package imports, directly or through others of the package, a
   module that imports it back, counting every import (module level, inside functions and
   under ``TYPE_CHECKING`` alike: a lazy import hides a cycle, it still means neither module
   can be read, moved or tested without the other). A package's ``__init__`` re-exports and
   is left out: every module is reached through it.

Usage: ``python3 tools/check_layers.py [--root REPO]``. Exit 0 when clean; exit 1 with one
line per violation (``file:line: importer -> imported: rule``).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_STATE = "accel_state"
_LAYER1 = ("accel_data", "accel_precision", "accel_checkpoint", "accel_tracking")
_LAYER2 = ("accel_parallel", "accel_inference", "accel_launch")

#: The DAG: for each internal package, the internal packages it may import.
ALLOWED: dict[str, frozenset[str]] = {
    _STATE: frozenset(),
    **{name: frozenset({_STATE}) for name in _LAYER1},
    "accel_parallel": frozenset({"accel_precision", _STATE}),
    "accel_inference": frozenset({"accel_checkpoint", _STATE}),
    "accel_launch": frozenset({_STATE}),
    "accel": frozenset({_STATE, *_LAYER1, *_LAYER2}),
    # packages/accelerate: the opt-in `accelerate` import name, mapped onto accel's modules.
    "accelerate": frozenset({"accel"}),
}
LAYER: dict[str, int] = {
    _STATE: 0, **dict.fromkeys(_LAYER1, 1), **dict.fromkeys(_LAYER2, 2), "accel": 3,
    "accelerate": 4,
}

#: Import names whose distribution is spelled differently (values: acceptable dists).
IMPORT_TO_DISTS: dict[str, tuple[str, ...]] = {
    "yaml": ("pyyaml",),
    "PIL": ("pillow",),
    "sklearn": ("scikit-learn",),
    "google": ("protobuf",),
    "attr": ("attrs",),
    "dateutil": ("python-dateutil",),
    "pkg_resources": ("setuptools",),
    "transformer_engine": ("transformer-engine",),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "tensorboard": ("tensorboard",),
    "torch": ("torch",),
    "safetensors": ("safetensors",),
    "packaging": ("packaging",),
    "numpy": ("numpy",),
    "cv2": ("opencv-python", "opencv-python-headless"),
    "bitsandbytes": ("bitsandbytes",),
    "torchao": ("torchao",),
    "deepspeed": ("deepspeed",),
}

_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def normalize(dist: str) -> str:
    """PEP 503 form, so ``PyYAML``, ``pyyaml`` and ``py_yaml`` compare equal where they should."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def requirement_name(requirement: str) -> str:
    match = _NAME_RE.match(requirement)
    return normalize(match.group(1)) if match else ""


@dataclass
class Member:
    """One workspace member: its distribution, its declared dependencies and its modules."""

    dist: str
    directory: Path
    deps: set[str]
    optional_deps: set[str]
    import_names: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    lazy: bool  # inside a function, a try block or an ``if TYPE_CHECKING:`` block

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def load_members(root: Path) -> tuple[list[Member], list[str]]:
    members: list[Member] = []
    problems: list[str] = []
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        rel = pyproject.relative_to(root)
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{rel}: invalid TOML ({exc}); fix the file")
            continue
        if "name" not in project:
            problems.append(f"{rel}: no [project].name; every member needs one")
            continue
        extras = project.get("optional-dependencies", {})
        member = Member(
            dist=normalize(project["name"]),
            directory=pyproject.parent,
            deps={requirement_name(r) for r in project.get("dependencies", [])},
            optional_deps={requirement_name(r) for reqs in extras.values() for r in reqs},
        )
        src = pyproject.parent / "src"
        if src.is_dir():
            for entry in src.iterdir():
                if (entry / "__init__.py").is_file():
                    member.import_names.add(entry.name)
                elif entry.suffix == ".py":
                    member.import_names.add(entry.stem)
        members.append(member)
    return members, problems


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _dynamic_import(node: ast.Call) -> str | None:
    """The module named by ``importlib.import_module("x")`` / ``__import__("x")``, if literal."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] != ".":
        return arg.value
    return None


def _lazy_target(node: ast.expr | None) -> str | None:
    """An internal module path written as a dict value, i.e. a lazy-import table entry.

    Only dotted paths (``"accel.accelerator"``) or the name of a layer-0..2 package
    (``"accel_state"``) count, so an ordinary ``"accel"`` string is not mistaken for one.
    """
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    if not _MODULE_RE.match(node.value):
        return None
    top = node.value.split(".")[0]
    if top in ALLOWED and (top != "accel" or "." in node.value):
        return node.value
    return None


def collect_imports(node: ast.AST, lazy: bool = False) -> Iterator[Import]:
    """Every absolute import under ``node``, marked lazy when not run at module import time."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield Import(alias.name, node.lineno, lazy)
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0 and node.module:
            yield Import(node.module, node.lineno, lazy)
    elif isinstance(node, ast.Call) and (module := _dynamic_import(node)):
        yield Import(module, node.lineno, lazy)
    elif isinstance(node, ast.Dict):
        for value in node.values:  # a PEP 562 facade's {"Name": "accel_x.module"} table
            if module := _lazy_target(value):
                yield Import(module, value.lineno, True)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        for decorator in getattr(node, "decorator_list", []):
            yield from collect_imports(decorator, lazy)
        body = node.body if isinstance(node.body, list) else [node.body]
        for child in [node.args, *body]:
            yield from collect_imports(child, True)
        return
    if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        lazy = True
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from collect_imports(child, True)
        for child in node.orelse:
            yield from collect_imports(child, lazy)
        return
    for child in ast.iter_child_nodes(node):
        yield from collect_imports(child, lazy)


def _layer_rule(owner: str, imported: str) -> str:
    allowed = ", ".join(sorted(ALLOWED[owner])) or "no internal package"
    if imported not in LAYER:
        kind = "not in the layer DAG"
    elif LAYER[imported] == LAYER[owner]:
        kind = "siblings never import each other"
    elif LAYER[imported] > LAYER[owner]:
        kind = "a lower layer never imports a higher one"
    else:
        kind = "not a declared edge of the DAG"
    return f"layer rule: {owner} (layer {LAYER[owner]}) may import only {allowed} ({kind})"


def check_import(imp: Import, owner: Member, owner_pkg: str,
                 provider: dict[str, Member]) -> str | None:
    """The rule ``imp`` breaks, or ``None``."""
    top = imp.top
    if top in owner.import_names:
        return None
    pyproject = owner.directory.name + "/pyproject.toml"
    if top in provider or top in ALLOWED:
        if owner_pkg not in ALLOWED:
            return (f"layer rule: {owner_pkg} is not in the layer DAG; add it to "
                    "tools/check_layers.py")
        if top not in ALLOWED[owner_pkg]:
            return _layer_rule(owner_pkg, top)
        dist = provider[top].dist if top in provider else normalize(top)
        declared = owner.deps | (owner.optional_deps if imp.lazy else set())
        if dist not in declared:
            return (f"undeclared dependency: add {dist!r} to [project].dependencies "
                    f"of packages/{pyproject}")
        return None
    if top in sys.stdlib_module_names or imp.lazy:
        return None
    dists = IMPORT_TO_DISTS.get(top, (normalize(top),))
    if any(d in owner.deps for d in dists):
        return None
    if any(d in owner.optional_deps for d in dists):
        return (f"optional dependency {dists[0]!r} imported at module level: import it inside "
                f"the function that needs it (DESIGN.md §6)")
    return (f"undeclared third-party import: add {dists[0]!r} to [project].dependencies of "
            f"packages/{pyproject}, or import it lazily inside a function")


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_targets(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every module path ``tree`` imports anywhere (relative imports resolved; ``from a
    import b`` names ``a.b`` as well as ``a``: whichever is a module counts)."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

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
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                groups.append(sorted([*group, node]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def check_cycles(member: Member, root: Path) -> list[str]:
    """One line per import cycle among the modules of ``member`` (check 3)."""
    src = member.directory / "src"
    paths = {_module_name(src, p): p for p in sorted(src.rglob("*.py"))}
    modules = {name for name, p in paths.items() if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        try:
            tree = ast.parse(paths[name].read_text(encoding="utf-8"))
        except SyntaxError:
            continue  # reported by the layer check
        graph[name] = (_module_targets(tree, name, False) & modules) - {name}
    graph = {name: targets & set(graph) for name, targets in graph.items()}
    return [f"{paths[cycle[0]].relative_to(root)}: import cycle: {' <-> '.join(cycle)}: move "
            "what both need into a module neither imports, or import one way only"
            for cycle in find_cycles(graph)]


def check(root: Path) -> tuple[list[str], int]:
    """All violations under ``root`` (one line each) and the number of modules read."""
    members, violations = load_members(root)
    provider = {name: m for m in members for name in m.import_names}
    modules = 0
    for member in members:
        src = member.directory / "src"
        for path in sorted(src.rglob("*.py")):
            modules += 1
            rel = path.relative_to(root)
            owner_pkg = path.relative_to(src).parts[0].removesuffix(".py")
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
            except SyntaxError as exc:
                violations.append(f"{rel}:{exc.lineno}: syntax error: {exc.msg}")
                continue
            for imp in collect_imports(tree):
                rule = check_import(imp, member, owner_pkg, provider)
                if rule:
                    violations.append(f"{rel}:{imp.line}: {owner_pkg} -> {imp.module}: {rule}")
        violations += check_cycles(member, root)
    return violations, modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root holding packages/*/ (default: this checkout)")
    args = parser.parse_args(argv)
    if not (args.root / "packages").is_dir():
        print(f"check_layers: {args.root}/packages is not a directory; pass --root REPO",
              file=sys.stderr)
        return 2
    violations, modules = check(args.root)
    for line in violations:
        print(line)
    if violations:
        print(f"check_layers: {len(violations)} violation(s) in {modules} modules "
              "(rules: DESIGN.md §3)", file=sys.stderr)
        return 1
    print(f"check_layers: OK ({modules} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

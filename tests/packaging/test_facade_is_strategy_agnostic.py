"""The facade never names a concrete strategy (DESIGN.md §4): it calls Strategy hooks only.

Every import in ``packages/accel/src`` is read with ``ast``; importing a concrete strategy
class (any ``Strategy`` subclass accel-parallel exports) or one of their modules fails.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import accel_parallel
from accel_parallel import Strategy

FACADE = Path(__file__).resolve().parents[2] / "packages" / "accel" / "src" / "accel"


def _concrete_strategies() -> dict[str, str]:
    """``class name -> module`` of every concrete strategy accel-parallel exports."""
    found = {}
    for name in accel_parallel.__all__:
        obj = getattr(accel_parallel, name)
        if inspect.isclass(obj) and issubclass(obj, Strategy) and obj is not Strategy:
            found[name] = obj.__module__
    return found


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every import in ``path`` (name None for ``import module``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


def test_the_rule_knows_the_builtin_strategies():
    concrete = _concrete_strategies()
    assert {"SingleDeviceStrategy", "DDPStrategy"} <= set(concrete), concrete


def test_no_facade_module_imports_a_concrete_strategy():
    concrete = _concrete_strategies()
    modules = set(concrete.values())
    offenders = []
    for path in sorted(FACADE.rglob("*.py")):
        for module, name in _imports(path):
            if module in modules or name in concrete or (
                    name is not None and f"{module}.{name}" in modules):
                offenders.append(f"{path.relative_to(FACADE)}: {module} {name or ''}".strip())
    assert not offenders, ("the facade must reach strategies through accel_parallel's "
                           f"registry and the Strategy interface only: {offenders}")


# -- plugin imports and DistributedType comparisons (issue 26, item 1) -------------------------
#: Accelerate's module paths that only re-export accel-parallel's names (``accel.utils``, ...)
#: and Accelerate's own test scripts (user code, kept as Accelerate wrote it).
SHELLS = {"__init__.py", "parallelism_config.py", "utils/__init__.py", "utils/dataclasses.py",
          "utils/deepspeed.py", "utils/fsdp_utils.py"}
#: The comparisons left in the facade, by file and the function holding each: Accelerate's own
#: public names whose meaning *is* the run type (``is_fsdp2``; ``deepspeed_required``'s
#: wrapper). Every other question about the run is the strategy's (``runs_distributed``,
#: ``multi_device``, ``replicates_parameters``, ``plugins_in_use``) or accel-parallel's
#: (``plugins.requested_distributed_type``). Any comparison elsewhere, a second one in these
#: functions, or a set of ``DistributedType`` members to test against, fails.
KNOWN_DISTRIBUTED_TYPE_COMPARISONS = {
    ("_accelerator_state.py", "is_fsdp2"): 1,  # AcceleratorState.is_fsdp2
    ("_requirements.py", "wrapper"): 1,  # deepspeed_required: the DeepSpeed-only helpers
    ("accelerator.py", "is_fsdp2"): 1,  # Accelerator.is_fsdp2
}


def _plugin_classes() -> set[str]:
    """Names of accel-parallel's plugin and configuration classes a backend reads."""
    import accel_parallel.plugins  # noqa: F401 - the resolution module names them

    names = {"FullyShardedDataParallelPlugin", "DeepSpeedPlugin", "ParallelismConfig",
             "TorchTensorParallelPlugin", "TorchDynamoPlugin", "HfDeepSpeedConfig",
             "DeepSpeedSequenceParallelConfig", "TorchContextParallelConfig",
             "TorchTensorParallelConfig"}
    assert names <= set(accel_parallel.__all__), sorted(names - set(accel_parallel.__all__))
    return names


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node outside ``if TYPE_CHECKING:`` blocks (annotations are no dependency)."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", None) == "TYPE_CHECKING"
               for body in node.body for n in ast.walk(body)}
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def _facade_files() -> list[tuple[str, ast.AST]]:
    files = []
    for path in sorted(FACADE.rglob("*.py")):
        rel = path.relative_to(FACADE).as_posix()
        if rel in SHELLS or rel.startswith("test_utils/"):
            continue
        files.append((rel, ast.parse(path.read_text(), str(path))))
    return files


def _names_a_member(x: ast.AST) -> bool:
    """``DistributedType.X``, or a tuple/list/set literal holding one."""
    if isinstance(x, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_member(e) for e in x.elts)
    return (isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name)
            and x.value.id == "DistributedType")


def _compares_distributed_type(node: ast.AST) -> bool:
    """A comparison with a member (``is``, ``==``, ``in (...)``), or a collection of members
    built to compare against later (``frozenset({DistributedType.X, ...})``)."""
    if isinstance(node, ast.Compare):
        return any(_names_a_member(part) for part in (node.left, *node.comparators))
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return _names_a_member(node)
    return False


def _comparisons(tree: ast.AST) -> dict[str, int]:
    """Comparisons by the innermost function holding each ("" at module level); a collection
    literal inside another, or inside the comparison itself, counts with it."""
    inner = {id(n) for node in ast.walk(tree)
             if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Compare))
             for child in ast.iter_child_nodes(node) for n in ast.walk(child)}
    runtime = {id(n) for n in _runtime_nodes(tree)}
    found: dict[str, int] = {}

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if id(node) in runtime and id(node) not in inner and _compares_distributed_type(node):
            found[where] = found.get(where, 0) + 1
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "")
    return found


def test_no_facade_module_imports_a_plugin_class():
    plugins = _plugin_classes()
    offenders = [f"{rel}:{node.lineno} {name}" for rel, tree in _facade_files()
                 for node in _runtime_nodes(tree) if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("accel_parallel")
                 for name in (a.name for a in node.names) if name in plugins]
    assert not offenders, ("plugins are resolved in accel_parallel.plugins; the facade "
                           f"forwards its arguments: {offenders}")


def test_distributed_type_comparisons_in_the_facade_only_go_down():
    found = {(rel, where): n for rel, tree in _facade_files()
             for where, n in _comparisons(tree).items()}
    grown = {key: n for key, n in found.items()
             if n > KNOWN_DISTRIBUTED_TYPE_COMPARISONS.get(key, 0)}
    assert not grown, ("a new DistributedType comparison in the facade: ask the strategy "
                       f"(a Strategy property, plugins_in_use) instead: {grown}")
    assert found == KNOWN_DISTRIBUTED_TYPE_COMPARISONS, (
        "one went away: drop it from KNOWN_DISTRIBUTED_TYPE_COMPARISONS", found)


def test_the_comparison_finder_sees_is_in_tuples_and_member_sets():
    source = ("a = t is DistributedType.FSDP\nb = t in (DistributedType.NO, x)\n"
              "c = t == other\nif TYPE_CHECKING:\n    d = t != DistributedType.NO\n"
              "S = frozenset({DistributedType.MULTI_GPU, (DistributedType.NO,)})\n"
              "def f():\n    return t in S or t == DistributedType.NO\n")
    assert _comparisons(ast.parse(source)) == {"": 3, "f": 1}


# -- backend packages (issue 26: the facade knows no backend) ----------------------------------
#: accel-parallel's per-backend packages: what one backend knows lives there.
BACKEND_PACKAGES = ("accel_parallel.deepspeed", "accel_parallel.fsdp", "accel_parallel.mesh",
                    "accel_parallel.pipeline")
#: Accelerate's module paths that re-export a backend's constants or helpers as Accelerate
#: has them there (``accelerate.utils.constants``' FSDP names, ``accelerate.utils.other``'s
#: ``get_model_tp_size``), besides the SHELLS above.
BACKEND_SHELLS = {"utils/constants.py", "utils/other.py"}


def test_no_facade_module_imports_a_backend_package():
    """Checkpoints of a backend's own layout load across through its registered writer
    (``full_states``, ``load_refusals``), not through facade code that imports it."""
    offenders = []
    for rel, tree in _facade_files():
        if rel in BACKEND_SHELLS:
            continue
        for node in _runtime_nodes(tree):
            modules = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                       [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{rel}:{node.lineno} {m}" for m in modules
                          if any(m == p or m.startswith(p + ".") for p in BACKEND_PACKAGES)]
    assert not offenders, ("a backend's knowledge belongs to its accel-parallel package, "
                           f"reached through a registry or the Strategy interface: {offenders}")

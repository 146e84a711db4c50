"""The facade never names a concrete strategy (DESIGN.md §4): it calls Strategy hooks only.

Every import in ``packages/accel/src`` is read with ``ast``; importing a concrete strategy
class (any ``Strategy`` subclass accel-parallel exports) or one of their modules fails, and
so do a ``DistributedType`` comparison and a backend's name (``fsdp``, ``deepspeed``,
``megatron``, ``zero3``) in the facade's code, except Accelerate's own public names, which
the facade must spell as Accelerate does (an explicit list below, issue 40.6).
"""

from __future__ import annotations

import ast
import inspect
import re
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


# -- plugin imports and DistributedType comparisons (issue 26 item 1, issue 40 item 6) --------
#: Accelerate's module paths that only re-export accel-parallel's names (``accel.utils``, ...)
#: and Accelerate's own test scripts (user code, kept as Accelerate wrote it).
SHELLS = {"__init__.py", "parallelism_config.py", "utils/__init__.py", "utils/dataclasses.py",
          "utils/deepspeed.py", "utils/fsdp_utils.py", "utils/megatron_lm.py"}
# No DistributedType comparison is left in the facade (issue 40.6): Accelerate's ``is_fsdp2``
# asks the strategy's ``shards_parameters``, ``deepspeed_required`` asks accel-parallel's
# ``state_view.refuse_other_runs``; every other question about the run is the strategy's
# (``runs_distributed``, ``multi_device``, ``replicates_parameters``, ``plugins_in_use``).


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


def test_no_distributed_type_comparison_in_the_facade():
    found = {f"{rel}:{where or '<module>'}": n for rel, tree in _facade_files()
             for where, n in _comparisons(tree).items()}
    assert not found, ("a DistributedType comparison in the facade: ask the strategy (a "
                       "RunCapabilities property, plugins_in_use) or accel_parallel.state_view "
                       f"instead: {found}")


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


# -- backend names (issue 40, item 6) ------------------------------------------------------------
#: A backend's name in an identifier or a string the facade's code holds (docstrings and
#: comments are prose, not logic, and are not read).
BACKEND_WORDS = re.compile(r"fsdp|deepspeed|megatron|zero[0-3]\b|zero_stage|zero_optimization",
                           re.IGNORECASE)
#: Accelerate's public names that hold a backend word: the facade defines or forwards them
#: spelled as Accelerate does; the logic behind them asks the strategy (``shards_parameters``)
#: or accel-parallel (``accel_parallel.state_view``). Nothing else may name a backend.
ACCELERATE_NAMES = frozenset({
    # Accelerator(...) and AcceleratorState(...) arguments, the state's attributes
    "fsdp_plugin", "deepspeed_plugin", "deepspeed_plugins", "megatron_lm_plugin",
    # Accelerator / AcceleratorState properties and methods
    "is_fsdp2", "get_deepspeed_plugin", "select_deepspeed_plugin",
    # accelerate.utils / accelerate.checkpointing / accelerate.commands.launch helpers
    "deepspeed_required", "get_fsdp2_grad_scaler", "merge_fsdp_weights",
    "prepare_deepspeed_cmd_env", "deepspeed_launcher", "DEEPSPEED_MULTINODE_LAUNCHERS",
    # accelerate.commands.to_fsdp2: the `accel to-fsdp2` verb
    "to_fsdp2_command", "to_fsdp2_command_parser", "to_fsdp2_command_register",
    "convert_config_to_fsdp2", "to-fsdp2",
})
#: The modules the names above are re-exported from (Accelerate's path and accel's home).
RE_EXPORTED_MODULES = frozenset({"accel.commands.to_fsdp2", "accel_launch.to_fsdp2"})


def _docstrings(tree: ast.AST) -> set[int]:
    holders = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, holders) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)}


def _spellings(node: ast.AST, docstrings: set[int]) -> tuple[list[str], list[str]]:
    """``(words, modules)`` that ``node`` spells: identifiers and strings, module paths."""
    if isinstance(node, ast.Name):
        return [node.id], []
    if isinstance(node, ast.Attribute):
        return [node.attr], []
    if isinstance(node, ast.arg):
        return [node.arg], []
    if isinstance(node, ast.keyword):
        return ([node.arg] if node.arg else []), []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name], []
    if isinstance(node, ast.Import):
        return [a.asname for a in node.names if a.asname], [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [n for a in node.names for n in (a.name, a.asname) if n], [node.module or ""]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ([] if id(node) in docstrings else [node.value]), []
    return [], []


def _backend_names(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, spelling)`` of every backend name outside :data:`ACCELERATE_NAMES` and
    :data:`RE_EXPORTED_MODULES`."""
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        words, modules = _spellings(node, docstrings)
        found += [(node.lineno, w) for w in words
                  if BACKEND_WORDS.search(w) and w not in ACCELERATE_NAMES]
        found += [(node.lineno, m) for m in modules
                  if BACKEND_WORDS.search(m) and m not in RE_EXPORTED_MODULES]
    return found


def test_the_name_finder_reads_code_not_prose():
    source = ('"""Runs FSDP."""\nimport accel_parallel.fsdp as sharding\n'
              "from accel_launch.to_fsdp2 import to_fsdp2_command\n"
              "def f(fsdp_plugin, use_deepspeed=False):\n"
              '    """DeepSpeed too."""\n    # zero3 in a comment\n'
              '    kind = "deepspeed" if use_deepspeed else f"zero3-{fsdp_plugin}"\n'
              "    return state.is_fsdp2 or kind.megatron_lm\n")
    found = sorted(w for _, w in _backend_names(ast.parse(source)))
    assert found == ["accel_parallel.fsdp", "deepspeed", "megatron_lm", "use_deepspeed",
                     "use_deepspeed", "zero3-"], found


def test_no_backend_name_in_the_facade_logic():
    offenders = [f"{rel}:{line} {word[:60]!r}" for rel, tree in _facade_files()
                 if rel not in BACKEND_SHELLS for line, word in _backend_names(tree)]
    assert not offenders, (
        "the facade names a backend: ask the strategy (accel_parallel.capabilities."
        "RunCapabilities) or accel_parallel (state_view, plugins) instead; only Accelerate's "
        f"own public names are spelled here (ACCELERATE_NAMES): {offenders}")

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

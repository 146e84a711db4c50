"""tools/check_layers.py: clean on this repository, and it names file, line and rule of a
violation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "check_layers.py"

#: A minimal copy of the real DAG: each member's declared internal dependencies.
MEMBERS = {
    "accel-state": ["torch>=2.4", "packaging>=23"],
    "accel-data": ["accel-state>=0.1,<0.2", "torch>=2.4"],
    "accel-precision": ["accel-state>=0.1,<0.2", "torch>=2.4"],
    "accel-parallel": ["accel-precision>=0.1,<0.2", "accel-state>=0.1,<0.2", "torch>=2.4"],
    "accel-launch": ["accel-state>=0.1,<0.2"],
    "accel": ["accel-state", "accel-data", "accel-parallel", "accel-launch", "accel-precision"],
}


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          timeout=60)


def make_tree(root: Path, modules: dict[str, str] | None = None,
              deps: dict[str, list[str]] | None = None,
              extras: dict[str, list[str]] | None = None) -> Path:
    """A fake workspace: one pyproject and ``__init__.py`` per member, plus ``modules``."""
    for dist, requirements in {**MEMBERS, **(deps or {})}.items():
        pkg = root / "packages" / dist
        src = pkg / "src" / dist.replace("-", "_")
        src.mkdir(parents=True, exist_ok=True)
        (src / "__init__.py").write_text('"""fake."""\n')
        lines = ["[project]", f'name = "{dist}"', 'version = "0.1.0"',
                 f"dependencies = {requirements!r}"]
        if extras and dist in extras:
            lines += ["[project.optional-dependencies]", f"extra = {extras[dist]!r}"]
        (pkg / "pyproject.toml").write_text("\n".join(lines).replace("'", '"') + "\n")
    for rel, source in (modules or {}).items():
        path = root / "packages" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def test_repository_is_clean() -> None:
    result = run_tool()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_clean_tree_passes(tmp_path: Path) -> None:
    make_tree(tmp_path, {
        "accel-data/src/accel_data/loader.py": """\
            from __future__ import annotations
            import os, json
            import torch
            from accel_state import env
            from . import sibling_module
            from .sub import thing
            """,
        "accel-parallel/src/accel_parallel/ddp.py": """\
            import accel_precision.amp
            from accel_state.errors import ConfigurationError
            def lazy():
                import deepspeed
                import importlib
                return importlib.import_module("accel_state.env")
            try:
                import torchao
            except ImportError:
                torchao = None
            """,
        "accel-state/src/accel_state/typing_only.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import numpy
            """,
        "accel-state/src/accel_state/names.py": "DIST = {'fp8': 'accel', 'x': 'accel.y z'}\n",
        "accel/src/accel/accelerator.py": "import accel_launch, accel_data, accel_parallel\n",
        "accel/src/accel/__init__.py":
            "_EXPORTS = {'A': 'accel.accelerator', 'B': 'accel_state'}\n",
    })
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


CASES = {
    "sibling": (
        "accel-data/src/accel_data/loader.py",
        "import os\n\nfrom accel_precision import amp\n",
        3, "accel_data -> accel_precision", "siblings never import each other"),
    "higher layer inside a function": (
        "accel-state/src/accel_state/state.py",
        "def f():\n    import accel.accelerator\n",
        2, "accel_state -> accel.accelerator", "lower layer never imports a higher one"),
    "TYPE_CHECKING block": (
        "accel-data/src/accel_data/types.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accel_parallel import x\n",
        3, "accel_data -> accel_parallel", "a lower layer never imports a higher one"),
    "importlib string literal": (
        "accel-parallel/src/accel_parallel/registry.py",
        "import importlib\n\n\ndef load():\n"
        "    return importlib.import_module('accel_launch.cli')\n",
        5, "accel_parallel -> accel_launch.cli", "siblings never import each other"),
    "__import__ string literal": (
        "accel-launch/src/accel_launch/cli.py",
        "mod = __import__('accel_data')\n",
        1, "accel_launch -> accel_data", "may import only accel_state"),
    "lazy-import table of a PEP 562 facade": (
        "accel-data/src/accel_data/__init__.py",
        "_EXPORTS = {\n    'DataLoaderShard': 'accel_data.loaders',\n"
        "    'X': 'accel_launch.cli',\n}\n",
        3, "accel_data -> accel_launch.cli", "a lower layer never imports a higher one"),
    "third-party at module level, undeclared": (
        "accel-state/src/accel_state/config.py",
        "import yaml\n",
        1, "accel_state -> yaml", "undeclared third-party import: add 'pyyaml'"),
    "class body runs at import time": (
        "accel-state/src/accel_state/config.py",
        "class C:\n    import numpy\n",
        2, "accel_state -> numpy", "undeclared third-party import: add 'numpy'"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_violation_names_file_line_and_rule(tmp_path: Path, case: str) -> None:
    rel, source, line, edge, rule = CASES[case]
    make_tree(tmp_path, {rel: source})
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"packages/{rel}:{line}: {edge}: "), lines[0]
    assert rule in lines[0], lines[0]


def test_undeclared_internal_dependency(tmp_path: Path) -> None:
    """accel_parallel -> accel_precision is a DAG edge, but the member must declare it."""
    make_tree(tmp_path, {"accel-parallel/src/accel_parallel/amp.py": "import accel_precision\n"},
              deps={"accel-parallel": ["accel-state>=0.1,<0.2", "torch>=2.4"]})
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert ("packages/accel-parallel/src/accel_parallel/amp.py:1: accel_parallel -> "
            "accel_precision: undeclared dependency: add 'accel-precision'") in result.stdout


def test_lazy_table_entries_must_be_declared(tmp_path: Path) -> None:
    make_tree(tmp_path, {"accel/src/accel/__init__.py": "_EXPORTS = {'T': 'accel_tracking'}\n"},
              deps={"accel-tracking": ["accel-state"]})
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert ("packages/accel/src/accel/__init__.py:1: accel -> accel_tracking: undeclared "
            "dependency: add 'accel-tracking'") in result.stdout


def test_optional_dependency_must_be_imported_lazily(tmp_path: Path) -> None:
    rel = "accel-precision/src/accel_precision/fp8.py"
    make_tree(tmp_path, {rel: "import torchao\n\n\ndef f():\n    import torchao.float8\n"},
              extras={"accel-precision": ["torchao>=0.10"]})
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"packages/{rel}:1: accel_precision -> torchao: optional dependency 'torchao' imported "
        "at module level: import it inside the function that needs it (DESIGN.md §6)"]


def test_declared_third_party_and_mapped_names_pass(tmp_path: Path) -> None:
    make_tree(tmp_path, {"accel-launch/src/accel_launch/config.py": "import yaml\nimport torch\n"},
              deps={"accel-launch": ["accel-state>=0.1,<0.2", "PyYAML>=6", "torch"]})
    assert run_tool("--root", str(tmp_path)).returncode == 0


def test_syntax_error_is_reported(tmp_path: Path) -> None:
    make_tree(tmp_path, {"accel-data/src/accel_data/broken.py": "x = (\n"})
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert "packages/accel-data/src/accel_data/broken.py:1: syntax error" in result.stdout


def test_every_violation_is_listed(tmp_path: Path) -> None:
    make_tree(tmp_path, {
        "accel-data/src/accel_data/a.py": "import accel_launch\nimport accel\n",
        "accel-state/src/accel_state/b.py": "import accel_data\n",
    })
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 3
    assert "3 violation(s)" in result.stderr


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    result = run_tool("--root", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "pass --root" in result.stderr


def test_an_import_cycle_is_named_lazy_or_not(tmp_path: Path) -> None:
    """prepare imports skip at the top, skip imports prepare inside a function; the typing
    and reader modules import each other only under TYPE_CHECKING: both are cycles (issue
    40.7). A module importing its own package's ``__init__`` (which re-exports) is not."""
    make_tree(tmp_path, {
        "accel-data/src/accel_data/prepare.py": "from accel_data.skip import Skip\n",
        "accel-data/src/accel_data/skip.py": """\
            class Skip:
                def build(self):
                    from accel_data import prepare
                    return prepare
            """,
        "accel-data/src/accel_data/typing_view.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .reader import Reader
            """,
        "accel-data/src/accel_data/reader.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from accel_data.typing_view import View
            from accel_data import prepare
            """,
        "accel-data/src/accel_data/alone.py": "import accel_data\n",
    })
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1, result.stdout
    cycles = [line for line in result.stdout.splitlines() if "import cycle" in line]
    assert len(cycles) == 2, result.stdout
    assert "import cycle: accel_data.prepare <-> accel_data.skip" in result.stdout
    assert "import cycle: accel_data.reader <-> accel_data.typing_view" in result.stdout
    assert "accel_data.alone" not in result.stdout

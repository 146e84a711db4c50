"""Importing one accel package pulls in only the layers below it, and nothing optional.

Each check runs ``import <package>`` in a fresh interpreter, so what other tests imported
cannot hide a stray import. The DAG comes from tools/check_layers.py (one source of truth):
the static check reads the code, this one watches what really happens at import time.
A package that is not installed in the running environment is skipped, so CI can run this
file inside each package's own environment (.ci/run); there CI_ACCEL_MEMBER names the
member under test and the packages below it are left to their own CI stage.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_dag() -> dict[str, frozenset[str]]:
    spec = importlib.util.spec_from_file_location("_check_layers", REPO / "tools/check_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module.ALLOWED


ALLOWED = _load_dag()
PACKAGES = sorted(ALLOWED)
#: Optional heavy dependencies: only ever imported lazily, by the feature that needs them.
OPTIONAL = ("deepspeed", "torchao", "transformer_engine", "wandb", "tensorboard", "mlflow")

_PROBE = """
import importlib.metadata, importlib.resources, json, sys
import {name} as pkg
print(json.dumps({{
    "modules": sorted({{m.split(".")[0] for m in sys.modules}}),
    "version": getattr(pkg, "__version__", None),
    "dist_version": importlib.metadata.version({dist!r}),
    "py_typed": importlib.resources.files({name!r}).joinpath("py.typed").is_file(),
}}))
"""


def dist_name(name: str) -> str:
    return name.replace("_", "-")


def closure(name: str) -> set[str]:
    """``name`` and every internal package it may import, directly or through another."""
    seen = {name}
    todo = [name]
    while todo:
        for dep in ALLOWED[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def _run(code: str) -> dict | str:
    """The JSON printed by ``code`` in a fresh interpreter, or its error output."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    if result.returncode != 0:
        return result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@cache
def _probe(name: str) -> dict | str:
    return _run(_PROBE.format(name=name, dist=dist_name(name)))


def probe(name: str) -> dict:
    """What a fresh ``import name`` loads and reports (one subprocess per package, cached)."""
    member = os.environ.get("CI_ACCEL_MEMBER")
    if member and member != dist_name(name):
        pytest.skip(f"CI checks {dist_name(name)} in its own stage (CI_ACCEL_MEMBER={member})")
    try:
        importlib.metadata.distribution(dist_name(name))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist_name(name)} is not installed in this environment")
    info = _probe(name)
    if isinstance(info, str):
        pytest.fail(f"`import {name}` failed in a fresh interpreter:\n{info}")
    return info


@cache
def torch_baseline() -> set[str]:
    """Top-level modules that a bare ``import torch`` loads by itself."""
    info = _run("import json, sys, torch; print(json.dumps({'modules': sorted(sys.modules)}))")
    assert isinstance(info, dict), info
    return {m.split(".")[0] for m in info["modules"]}


@pytest.mark.parametrize("name", PACKAGES)
def test_import_loads_only_lower_layers(name: str) -> None:
    loaded = set(probe(name)["modules"])
    forbidden = set(ALLOWED) - closure(name)
    assert not loaded & forbidden, (
        f"`import {name}` imported {sorted(loaded & forbidden)}: a sibling or a higher layer "
        f"(allowed: {sorted(closure(name) - {name})})")


@pytest.mark.parametrize("name", PACKAGES)
def test_import_loads_no_optional_dependency(name: str) -> None:
    loaded = set(probe(name)["modules"]) & set(OPTIONAL)
    assert not loaded, f"`import {name}` imported optional {sorted(loaded)}: import it lazily"


@pytest.mark.parametrize("name", PACKAGES)
def test_version_matches_distribution(name: str) -> None:
    info = probe(name)
    assert info["version"] == info["dist_version"], (
        f"{name}.__version__ is {info['version']!r} but the installed {dist_name(name)} is "
        f"{info['dist_version']!r}: keep __init__.py and pyproject.toml in step")


@pytest.mark.parametrize("name", PACKAGES)
def test_ships_py_typed(name: str) -> None:
    assert probe(name)["py_typed"], f"{name} has no py.typed marker next to its __init__.py"


def test_accel_state_stays_light() -> None:
    """Layer 0 is imported by everything: it must not drag in config or optional libraries."""
    loaded = set(probe("accel_state")["modules"])
    assert "yaml" not in loaded, "`import accel_state` imported yaml"
    if "numpy" in loaded:
        assert "numpy" in torch_baseline(), (
            "`import accel_state` imported numpy, which `import torch` alone does not")


def test_deepspeed_is_imported_only_by_prepare() -> None:
    """Building an Accelerator with a DeepSpeed plugin (and the plugin's API) and running
    `accel --help` import no DeepSpeed: the strategy imports it at the first prepare."""
    pytest.importorskip("accel")
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("needs deepspeed installed (accel[deepspeed]) to show it is not imported")
    info = _run(
        "import json, sys\n"
        "from accel import Accelerator, DeepSpeedPlugin\n"
        "from accel.utils import DummyOptim, DummyScheduler, HfDeepSpeedConfig\n"
        "accelerator = Accelerator(cpu=True, deepspeed_plugin={'zero_stage': 2})\n"
        "assert type(accelerator.strategy).__name__ == 'DeepSpeedStrategy'\n"
        "with DeepSpeedPlugin(zero_stage=2).zero3_init_context_manager(): pass\n"
        "print(json.dumps({'modules': sorted({m.split('.')[0] for m in sys.modules})}))\n")
    assert isinstance(info, dict), info
    assert "deepspeed" not in info["modules"], "the DeepSpeed plugin imported deepspeed"
    cli = _run(
        "import contextlib, io, json, sys\n"
        "from accel_launch.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print(json.dumps({'modules': sorted({m.split('.')[0] for m in sys.modules})}))\n")
    assert isinstance(cli, dict), cli
    assert "deepspeed" not in cli["modules"], "`accel --help` imported deepspeed"

"""How the libraries get accel's shim in place of Accelerate, as docs/huggingface.md says:
the metadata `pip check` reads, and the workspace lock that resolves their requirement."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

SHIM_VERSION = "1.15.0+accel.1"
REPO = Path(__file__).resolve().parents[2]


def _accelerate_requirements() -> dict[str, Requirement]:
    """``{distribution: its requirement on accelerate}`` over the environment, for the
    requirements that apply here (extras left out, as `pip check` does)."""
    found = {}
    for dist in importlib.metadata.distributions():
        for line in dist.requires or ():
            req = Requirement(line)
            applies = req.marker is None or req.marker.evaluate({"extra": ""})
            if req.name == "accelerate" and applies:
                found[dist.metadata["Name"]] = req
    return found


def test_the_installed_accelerate_is_the_shim_alone():
    dists = list(importlib.metadata.distributions(name="accelerate"))
    assert len(dists) == 1
    assert dists[0].version == SHIM_VERSION
    assert dists[0].metadata["Summary"].startswith("accel's compatibility shim")


def test_every_accelerate_requirement_is_met_by_the_shim():
    requirements = _accelerate_requirements()
    assert {"peft", "trl"} <= set(requirements), requirements  # they declare it
    version = Version(SHIM_VERSION)
    unmet = {name: str(req) for name, req in requirements.items()
             if not req.specifier.contains(version, prereleases=True)}
    assert unmet == {}, f"requirements the shim does not meet: {unmet}"


def test_pip_check_reports_nothing_about_accelerate():
    if shutil.which("uv"):
        command = ["uv", "pip", "check", "--python", sys.executable]
    elif importlib.util.find_spec("pip"):
        command = [sys.executable, "-m", "pip", "check"]
    else:
        pytest.skip("neither uv nor pip is on this machine")
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    # the whole environment is checked; what this test owns is that nothing involves accelerate
    assert "accelerate" not in output.lower(), output


def test_the_lock_resolves_every_accelerate_requirement_to_the_workspace_shim():
    """uv gives a workspace member's name precedence: peft's and trl's `accelerate` is the
    shim, with no override and no Accelerate from the index, on every platform of the lock."""
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    packages = [p for p in lock["package"] if p["name"] == "accelerate"]
    assert len(packages) == 1, packages
    assert packages[0]["version"] == SHIM_VERSION
    assert packages[0]["source"] == {"editable": "packages/accelerate"}
    by_name = {p["name"]: p for p in lock["package"]}
    for library in ("peft", "trl"):
        assert "accelerate" in {d["name"] for d in by_name[library]["dependencies"]}, library
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert root["tool"]["uv"]["sources"]["accelerate"] == {"workspace": True}
    assert "accelerate" in root["dependency-groups"]["hf"]
    assert set(root["tool"]["uv"]["default-groups"]) == {"dev", "hf"}


def test_benchmarks_never_take_the_shim_for_accelerate(capsys):
    """tools/bench compares accel with Hugging Face Accelerate; with the shim importable the
    "Accelerate" column would be accel itself, so it is left out with the command to add it."""
    spec = importlib.util.spec_from_file_location("_bench_common", REPO / "tools/bench/common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    assert common.import_accelerate() is None
    assert "accel's shim" in capsys.readouterr().out

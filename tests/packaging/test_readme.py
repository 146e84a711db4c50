"""The README is the first thing a user reads: its package table shows each package's
current version (major.minor, from the package's own pyproject), and its set-up states the
Python the packages require and how to get uv on a bare machine."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _projects() -> dict[str, dict]:
    return {p.parent.name: tomllib.loads(p.read_text())["project"]
            for p in sorted((REPO / "packages").glob("*/pyproject.toml"))}


def test_package_table_shows_each_packages_version():
    rows = dict(re.findall(r"^\| (accel[\w-]*) \|.*\| ([\d.]+) \|$", README, re.MULTILINE))
    listed = {name: project for name, project in _projects().items()
              if name in ("accel", "accelerate") or name.startswith("accel-")}
    assert set(rows) == set(listed), (sorted(rows), sorted(listed))
    wrong = {name: (rows[name], project["version"]) for name, project in listed.items()
             if not project["version"].startswith(rows[name] + ".")
             and project["version"] != rows[name]}
    assert not wrong, f"README table (shown, actual): {wrong}"


def test_setup_names_python_and_uv():
    floors = {project["requires-python"] for project in _projects().values()}
    assert floors == {">=3.10"}, floors
    assert "Python 3.10 or newer" in README
    assert "python3 -m pip install uv" in README

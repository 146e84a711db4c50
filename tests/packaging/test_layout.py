"""Every member has the files a separately released package needs (DESIGN.md §2).

Also guards the test layout that lets `uv run pytest` collect all packages' tests in one
run: with ``--import-mode=importlib`` and no ``__init__.py`` in test directories, files
with the same basename (``tests/test_state.py`` in two packages) do not clash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
MEMBERS = sorted(p.parent for p in REPO.glob("packages/*/pyproject.toml"))


def test_members_found() -> None:
    assert len(MEMBERS) == 10, [m.name for m in MEMBERS]  # 9 accel packages + the shim


@pytest.mark.parametrize("member", MEMBERS, ids=[m.name for m in MEMBERS])
def test_member_layout(member: Path) -> None:
    project = tomllib.loads((member / "pyproject.toml").read_text())["project"]
    assert project["name"] == member.name, "the directory is named after the distribution"
    import_name = member.name.replace("-", "_")
    for rel in ("README.md", "CHANGELOG.md", f"src/{import_name}/__init__.py",
                f"src/{import_name}/py.typed"):
        assert (member / rel).is_file(), f"{member.name} lacks {rel}"


@pytest.mark.parametrize("member", MEMBERS, ids=[m.name for m in MEMBERS])
def test_member_has_tests(member: Path) -> None:
    """CI runs each member's own tests alone; a member without any proves nothing there."""
    assert list((member / "tests").rglob("test_*.py")), (
        f"{member.name}/tests has no test_*.py: add at least one real test of the package")


def test_no_init_py_in_test_directories() -> None:
    found = [p.relative_to(REPO) for d in [*(m / "tests" for m in MEMBERS), REPO / "tests"]
             for p in d.rglob("__init__.py")]
    assert not found, f"remove {found}: test directories are not packages (--import-mode=importlib)"


def test_root_pytest_config_collects_every_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert set(config["testpaths"]) >= {"packages", "tests"}
    assert "--import-mode=importlib" in config["addopts"]

"""The docs site builds with `mkdocs build --strict` (broken links and anchors, pages missing
from the navigation and docstring warnings fail it), and its API reference, generated from
the docstrings by mkdocstrings, lists every public name of every package."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

#: the module whose ``__all__`` each API page documents (accel_launch's package is the CLI)
API_MODULES = {
    "accel": "accel", "accel_state": "accel_state", "accel_data": "accel_data",
    "accel_precision": "accel_precision", "accel_checkpoint": "accel_checkpoint",
    "accel_parallel": "accel_parallel", "accel_inference": "accel_inference",
    "accel_tracking": "accel_tracking", "accel_launch": "accel_launch.launchers",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for plugin in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(plugin.split(".")[0]) is None:
            pytest.skip(f"{plugin} is not installed (it is in the root's dev dependency group)")
    out = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    print(f"mkdocs build --strict: {elapsed:.1f} s")
    return out


def test_docs_build_strictly_with_every_page_in_the_navigation(site: Path) -> None:
    mkdocs = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert pages, "no pages"
    for page in pages:
        assert f" {page}\n" in mkdocs, f"docs/{page} is not in mkdocs.yml's nav"
        html = site / ("index.html" if page == "index.md" else page[:-3] + "/index.html")
        assert html.is_file(), html


def test_every_package_has_an_api_page_listing_its_public_names(site: Path) -> None:
    # packages/accelerate (the `accelerate` shim) has no names of its own: they are accel's
    # (docs/huggingface.md says what it is)
    packages = sorted(p.name for p in REPO.glob("packages/*/src/*")
                      if (p / "__init__.py").is_file() and p.name != "accelerate")
    assert sorted(API_MODULES) == packages, "a package without an API page (or a stale one)"
    for page, module_name in API_MODULES.items():
        source = (DOCS / "api" / f"{page}.md").read_text()
        assert f"<!-- api: {module_name} -->" in source, page
        module = importlib.import_module(module_name)
        html = (site / "api" / page / "index.html").read_text()
        missing = [name for name in module.__all__ if f'id="{module_name}.{name}"' not in html
                   and f"<code>{name}</code>" not in html]
        assert not missing, f"api/{page}.md does not show {missing}"


def test_api_pages_render_docstrings(site: Path) -> None:
    from accel import Accelerator

    html = (site / "api" / "accel" / "index.html").read_text()
    first_line = Accelerator.__doc__.strip().splitlines()[0].split("`")[0].strip()
    assert first_line and first_line in re.sub(r"<[^>]+>", "", html)
    # methods are listed too, also those of the facade's private mixins
    for method in ("prepare", "save_state", "log", "gather_for_metrics", "autocast"):
        assert f'id="accel.Accelerator.{method}"' in html, method
    # names re-exported from another package link to their home page
    assert re.search(r'<code>PartialState</code></td>\s*<td><a href="../accel_state/', html), \
        "the re-export table of api/accel.md"


def test_how_to_page_names_every_example_and_the_readme_links_the_migration_page() -> None:
    howto = (DOCS / "howto.md").read_text()
    for script in sorted((REPO / "examples").glob("*.py")):
        assert f"examples/{script.name}" in howto, f"docs/howto.md does not list {script.name}"
    readme = (REPO / "README.md").read_text()
    assert "## Differences from Accelerate" in readme
    assert "(docs/migration.md)" in readme

"""docs/launch.md's flag and config-key reference is generated from the parser: it cannot drift."""

from __future__ import annotations

from pathlib import Path

from accel_launch.flags import all_flags
from accel_launch.reference import update_document

DOC = Path(__file__).resolve().parents[2] / "docs" / "launch.md"


def test_launch_docs_match_the_parser() -> None:
    text = DOC.read_text()
    assert text == update_document(text), (
        "docs/launch.md is out of date: run `uv run python -m accel_launch.reference "
        "docs/launch.md`")
    for flag in all_flags():
        assert f"`{flag.name}`" in text, flag.name


def test_launch_docs_are_in_the_site_navigation() -> None:
    mkdocs = (DOC.parents[1] / "mkdocs.yml").read_text()
    assert "launch.md" in mkdocs

"""docs/cli.md's reference of every `accel` verb is generated from the parsers: it cannot drift."""

from __future__ import annotations

import argparse
from pathlib import Path

from accel_launch.cli import build_parser
from accel_launch.cli_reference import cli_reference, update_cli_document

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_cli_docs_match_the_parsers() -> None:
    text = DOC.read_text()
    assert text == update_cli_document(text), (
        "docs/cli.md is out of date: run `uv run python -m accel_launch.cli_reference docs/cli.md`")


def test_every_verb_and_flag_is_documented() -> None:
    text = DOC.read_text()
    verbs = _verbs()
    # the verbs this repository's packages register, at least
    assert {"checkpoint", "config", "env", "estimate-memory", "launch", "merge-weights", "test",
            "to-fsdp2"} <= set(verbs)
    for name, parser in verbs.items():
        assert f"## `accel {name}`\n" in text, name
        if name == "launch" or getattr(parser, "accel_flags_elsewhere", None):
            # flags in docs/launch.md (tests/packaging/test_launch_docs.py)
            assert "(launch.md#flags)" in text
            continue
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option not in getattr(
                        action, "accel_alt_spellings", ()) and option != "--help":
                    assert f"`{option}`" in text, f"accel {name} {option}"
    assert "### `accel config default`" in text and "### `accel checkpoint verify`" in text


def test_reference_rows_carry_choices_defaults_and_help() -> None:
    reference = cli_reference()
    row = next(line for line in reference.splitlines() if line.startswith("| `--strategy`"))
    assert "`ddp`, `fsdp`" in row and "| `ddp` |" in row and "how state is split" in row
    assert "accel to-fsdp2 [options] --config_file PATH" in reference  # required flags shown


def test_cli_page_is_in_the_site_navigation() -> None:
    assert " cli.md\n" in (DOC.parents[1] / "mkdocs.yml").read_text()

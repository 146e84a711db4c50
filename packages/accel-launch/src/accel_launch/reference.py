"""The flag and config-key reference of docs/launch.md, generated from the real parser.

``python -m accel_launch.reference docs/launch.md`` rewrites the text between the
``<!-- flags:begin -->`` / ``<!-- flags:end -->`` and ``<!-- schema:begin -->`` /
``<!-- schema:end -->`` markers; a test regenerates both and compares, so the docs cannot
drift from the parser.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from accel_launch.flags import flag_by_dest

__all__ = ["flag_reference", "schema_reference", "update_document"]

_DEFAULT_NOTE = {None: "", False: ""}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.choices:
        return "`" + "`, `".join(str(c) for c in action.choices) + "`"
    return f"`{action.metavar}`" if action.metavar else "value"


def flag_reference() -> str:
    """One Markdown table per flag group of `accel launch`, straight from the parser."""
    from accel_launch.launch import launch_command_parser

    parser = launch_command_parser()
    table = flag_by_dest()
    out: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.option_strings and a.dest != "help"]
        if not actions:
            continue
        out += [f"### {group.title}", "", group.description or "", "",
                "| flag | value | default | config key | worker variable | meaning |",
                "|---|---|---|---|---|---|"]
        for action in actions:
            flag = table.get(action.dest)
            twins = getattr(action, "accel_alt_spellings", frozenset())
            names = ", ".join(f"`{o}`" for o in action.option_strings if o not in twins)
            default = "" if flag is None or flag.default in _DEFAULT_NOTE else f"`{flag.default}`"
            config = ""
            if flag is not None and flag.config is not None:
                section, key = flag.config
                config = f"`{section}.{key}`" if section else f"`{key}`"
            env = f"`{flag.env}`" if flag is not None and flag.env else ""
            out.append(f"| {names} | {_cell(_kind(action))} | {default} | {config} | {env} | "
                       f"{_cell(action.help or '')} |")
        out.append("")
    return "\n".join(out).strip() + "\n"


def schema_reference() -> str:
    """The config file's keys by section, with their type, from the same table."""
    from accel_launch.config_file import _ACCEPTED, _RENAMES, _SECTION_EXTRAS, config_schema

    out = ["| section | key | type | flag |", "|---|---|---|---|"]
    for section, keys in config_schema().items():
        for key, flag in sorted(keys.items()):
            kind = "true/false" if flag.kind in ("switch", "bool") else flag.kind
            if flag.choices:
                kind = " / ".join(flag.choices)
            out.append(f"| {section or '(top level)'} | `{key}` | {_cell(kind)} | `{flag.name}` |")
    for key, kind in sorted(_ACCEPTED.items()):
        out.append(f"| (top level) | `{key}` | {kind} | accepted (see below) |")
    for section, renames in sorted(_RENAMES.items()):
        for old, key in sorted(renames.items()):
            out.append(f"| {section} | `{old}` | as `{key}` | old name of `{key}` |")
    for section, extras in sorted(_SECTION_EXTRAS.items()):
        for key, kind in sorted(extras.items()):
            out.append(f"| {section} | `{key}` | {kind} | accepted, old spelling |")
    return "\n".join(out) + "\n"


def _replace(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"markers <!-- {name}:begin --> / <!-- {name}:end --> not found")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def update_document(text: str) -> str:
    """``text`` with both generated sections replaced by the current reference."""
    return _replace(_replace(text, "flags", flag_reference()), "schema", schema_reference())


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/launch.md")
    target.write_text(update_document(target.read_text()))

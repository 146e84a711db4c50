"""docs/cli.md's reference of every `accel` verb, generated from the real parsers.

``python -m accel_launch.cli_reference docs/cli.md`` rewrites the text between the
``<!-- cli:begin -->`` / ``<!-- cli:end -->`` markers with one section per verb (and per
sub-action, e.g. ``accel config default``) that the installed packages register in the
``accel.cli`` entry-point group; a test regenerates it and compares, so the page cannot
drift from the parsers. ``accel launch``'s own flags have their longer reference in
docs/launch.md (``accel_launch.reference``); here it gets a pointer.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from accel_launch.cli import build_parser

__all__ = ["cli_reference", "update_cli_document"]

# Verbs documented at length on another page: section -> the link shown instead of a table.
_ELSEWHERE = {"launch": "launch.md#flags"}


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    twins = getattr(action, "accel_alt_spellings", frozenset())
    return ", ".join(f"`{o}`" for o in action.option_strings if o not in twins)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.choices:
        text = "`" + "`, `".join(str(c) for c in action.choices) + "`"
    else:
        text = f"`{action.metavar or action.dest.upper()}`"
    return text + (" ..." if action.nargs in ("+", "*") else "")


def _default(action: argparse.Action) -> str:
    if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    parts = [prog]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parts.append("<" + (action.metavar or "command").strip("<>") + "> ...")
        elif isinstance(action, argparse._HelpAction):
            continue
        elif not action.option_strings:
            parts.append(str(action.metavar or action.dest).upper())
        elif action.required:
            parts.append(f"{_names(action).split(', ')[0].strip('`')} {_value(action).strip('`')}")
    if any(a.option_strings and not a.required and not isinstance(a, argparse._HelpAction)
           for a in parser._actions):
        parts.insert(1, "[options]")
    return " ".join(parts)


def _section(prog: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{prog}`", ""]
    if summary:
        out += [_cell(summary), ""]
    verb = prog.split()[1] if prog.count(" ") == 1 else None
    if verb in _ELSEWHERE:
        return out + [f"Every flag, its config key and worker variable: "
                      f"[the launch reference]({_ELSEWHERE[verb]}).", ""]
    if parser.description and parser.description != summary:
        out += [_cell(parser.description), ""]
    shared = getattr(parser, "accel_flags_elsewhere", None)  # a verb taking launch's flags
    if shared is not None:
        return out + ["```text", f"{prog} [accel launch flags]", "```", "",
                      f"Its flags are `accel launch`'s: [the launch reference]({shared}).", ""]
    out += ["```text", _synopsis(prog, parser), "```", ""]
    rows = []
    subparsers: list[argparse._SubParsersAction] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            subparsers.append(action)
            continue
        rows.append(f"| {_names(action)} | {_cell(_value(action))} | {_default(action)} | "
                    f"{_cell(action.help or '')} |")
    if rows:
        out += ["| argument | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    for sub in subparsers:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            out += _section(f"{prog} {name}", helps.get(name, ""), child, level + 1)
    return out


def cli_reference() -> str:
    """One section per `accel` verb, in name order, straight from the parsers."""
    parser = build_parser()
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in sorted(action.choices.items()):
                out += _section(f"accel {name}", helps.get(name, ""), child, 2)
    return "\n".join(out).strip() + "\n"


def update_cli_document(text: str) -> str:
    """``text`` with the part between the ``cli`` markers replaced by the current reference."""
    pattern = re.compile(r"(<!-- cli:begin -->\n).*?(<!-- cli:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError("markers <!-- cli:begin --> / <!-- cli:end --> not found")
    body = cli_reference()
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/cli.md")
    target.write_text(update_cli_document(target.read_text()))

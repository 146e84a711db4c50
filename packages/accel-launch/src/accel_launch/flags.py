"""One table of `accel launch` flags: the parser, the config-file schema, the worker
environment and docs/launch.md are all built from it, so they cannot disagree.

Every flag's argparse default is ``None`` ("not given"; a switch's ``False``, and Accelerate's
parser value where code reads one, :attr:`Flag.parser_default`): :mod:`accel_launch.resolve`
then fills it from the config file or from :attr:`Flag.default`, and remembers which source
won.
This module imports neither torch nor accel_state (whose package imports torch):
``accel --help`` must stay instant.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from accel_launch.flag_spec import Flag, Group

__all__ = ["Flag", "GROUPS", "Group", "add_flags", "all_flags", "flag_by_dest", "match_choice",
           "parse_bool", "parse_mapping"]

_TRUE = {"1", "true", "yes", "y", "on", "t"}
_FALSE = {"0", "false", "no", "n", "off", "f", "none"}


def parse_bool(value: object) -> bool:
    """``true/false/1/0/yes/no`` (any case) or a real bool; anything else is an error."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


def _groups() -> tuple[Group, ...]:
    from accel_launch.flags_core import CORE_GROUPS
    from accel_launch.flags_plugins import PLUGIN_GROUPS

    return (*CORE_GROUPS, *PLUGIN_GROUPS)


class _Lazy(Sequence[Group]):
    """The groups, built on first use: the table modules load when a flag is needed."""

    _value: tuple[Group, ...] | None = None

    def _get(self) -> tuple[Group, ...]:
        if self._value is None:
            self._value = _groups()
        return self._value

    def __getitem__(self, index: Any) -> Any:
        return self._get()[index]

    def __len__(self) -> int:
        return len(self._get())


GROUPS: Sequence[Group] = _Lazy()


def all_flags() -> Iterator[Flag]:
    for group in GROUPS:
        yield from group.flags


def flag_by_dest() -> dict[str, Flag]:
    return {f.dest: f for f in all_flags()}


def _typed(kind: str, flag: str) -> Any:
    def convert(text: str) -> Any:
        try:
            if kind == "int":
                return int(text)
            if kind == "float":
                return float(text)
            return parse_bool(text)
        except (ValueError, argparse.ArgumentTypeError):
            expected = {"int": "a whole number", "float": "a number"}.get(kind, "true or false")
            raise argparse.ArgumentTypeError(f"{flag} expects {expected}, got {text!r}") from None
    convert.__name__ = kind
    return convert


def parse_mapping(value: object, flag: str) -> dict[str, Any]:
    """A mapping as it is, or a JSON object's text as a dict; anything else is an error
    naming ``flag`` (``--strategy_config '{"level": 2}'``)."""
    if isinstance(value, dict):
        return value
    import json

    try:
        found = json.loads(str(value))
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise argparse.ArgumentTypeError(
            f"{flag} expects a JSON object of option: value, e.g. '{{\"level\": 2}}', got "
            f"{value!r}")
    return found


def match_choice(value: object, choices: Sequence[str]) -> str | None:
    """The choice ``value`` names, exactly or else in another case; None if none."""
    text = str(value)
    if text in choices:
        return text
    return next((c for c in choices if c.lower() == text.lower()), None)


def _mapping(flag: str) -> Any:
    def convert(text: str) -> dict[str, Any]:
        return parse_mapping(text, flag)
    convert.__name__ = "JSON object"
    return convert


def _choice(choices: Sequence[str]) -> Any:
    def convert(text: str) -> str:
        return match_choice(text, choices) or text  # argparse then names the bad value
    convert.__name__ = "choice"
    return convert


def _add_one(group: Any, flag: Flag) -> None:
    kwargs: dict[str, Any] = {"dest": flag.dest, "default": flag.parser_default,
                              "help": flag.help}
    if flag.kind == "switch":
        # False, as Accelerate's parser has it: a switch cannot be turned off on the command
        # line, so resolution reads False as "not given" and the config file still applies.
        kwargs.update(action="store_const", const=True, default=False)
    else:
        if flag.kind in ("int", "float", "bool"):
            kwargs["type"] = _typed(flag.kind, flag.name)
        if flag.kind == "choice":
            kwargs["choices"] = flag.choices
            kwargs["type"] = _choice(flag.choices)
        if flag.kind == "multi":
            kwargs["action"] = "append"
        if flag.kind == "mapping":
            kwargs["type"] = _mapping(flag.name)
        kwargs["metavar"] = flag.metavar or (
            "{" + ",".join(flag.choices) + "}" if flag.kind == "choice" else
            "true|false" if flag.kind == "bool" else flag.kind.upper())
    group.add_argument(*flag.opts, **kwargs)


def add_flags(parser: Any) -> None:
    """Declare every flag of the table on ``parser`` (an AccelArgumentParser)."""
    for group in GROUPS:
        arg_group = parser.add_argument_group(group.title, group.description)
        for flag in group.flags:
            _add_one(arg_group, flag)

"""The argument parser every `accel` verb uses.

Two things plain :mod:`argparse` gets wrong for a launcher CLI:

* Accelerate accepts ``--num_processes`` and ``--num-processes`` alike, so every long flag
  registered here answers to both spellings (the help shows only the one it was declared
  with). The alternate spelling is a real option string, so nothing is rewritten: the
  arguments passed through to a training script are never touched.
* An unknown flag is an error naming the flag and the closest known ones, raised by the
  parser of the verb it was given to (so the usage line printed is that verb's), instead of
  argparse's silent prefix matching or a top-level "unrecognized arguments".
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["AccelArgumentParser", "AccelHelpFormatter", "alternate_spellings", "verb_parser"]

_ALT_ATTR = "accel_alt_spellings"


def alternate_spellings(option_strings: Iterable[str]) -> list[str]:
    """Hyphen/underscore twins of the long options in ``option_strings`` not already listed."""
    given = list(option_strings)
    extra: list[str] = []
    for opt in given:
        if not opt.startswith("--"):
            continue
        body = opt[2:]
        for twin in ("--" + body.replace("_", "-"), "--" + body.replace("-", "_")):
            if twin not in given and twin not in extra:
                extra.append(twin)
    return extra


def _add_with_twins(container: Any, add: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> argparse.Action:
    """Register ``args`` plus their twin spellings; remember the twins on the action."""
    twins = alternate_spellings(a for a in args if isinstance(a, str))
    # A twin that another action already owns (declared explicitly) is left to it.
    twins = [t for t in twins if t not in container._option_string_actions]
    action = add(*args, *twins, **kwargs)
    setattr(action, _ALT_ATTR, frozenset(twins))
    return action


class _AccelArgumentGroup(argparse._ArgumentGroup):
    """Argument group whose flags get both spellings too."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return _add_with_twins(self, super().add_argument, args, kwargs)


class _AccelMutuallyExclusiveGroup(argparse._MutuallyExclusiveGroup):
    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return _add_with_twins(self, super().add_argument, args, kwargs)


class AccelHelpFormatter(argparse.HelpFormatter):
    """Shows each flag under the spelling it was declared with, not its generated twin."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        twins = getattr(action, _ALT_ATTR, frozenset())
        if not twins:
            return super()._format_action_invocation(action)
        shown = [o for o in action.option_strings if o not in twins]
        saved = action.option_strings
        action.option_strings = shown
        try:
            return super()._format_action_invocation(action)
        finally:
            action.option_strings = saved


class AccelArgumentParser(argparse.ArgumentParser):
    """ArgumentParser with hyphen/underscore twins, no prefix matching and strict unknown flags.

    Sub-parsers made through ``add_subparsers().add_parser`` are of this class too, so a
    third-party verb gets the same behaviour without doing anything.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", AccelHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return _add_with_twins(self, super().add_argument, args, kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> argparse._ArgumentGroup:
        group = _AccelArgumentGroup(self, *args, **kwargs)
        self._action_groups.append(group)
        return group

    def add_mutually_exclusive_group(self, **kwargs: Any) -> argparse._MutuallyExclusiveGroup:
        group = _AccelMutuallyExclusiveGroup(self, **kwargs)
        self._mutually_exclusive_groups.append(group)
        return group

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self._unknown_message(extras))
        return namespace, extras

    def _unknown_message(self, extras: list[str]) -> str:
        flags = [e.split("=", 1)[0] for e in extras if e.startswith("-") and e != "-"]
        if not flags:
            return (f"unrecognized arguments: {' '.join(extras)} "
                    f"(see `{self.prog} --help` for what it accepts)")
        known = [o for o in self._option_string_actions if o.startswith("--")]
        parts = []
        for flag in flags:
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            parts.append(f"{flag}{hint}")
        return (f"unknown flag {', '.join(parts)}: remove it or see "
                f"`{self.prog} --help` for the flags it accepts")


def verb_parser(register: Any, verb: str, subparsers: Any = None) -> argparse.ArgumentParser:
    """The parser of one ``accel`` verb, from the ``register`` function that declares it.

    Accelerate's ``*_command_parser(subparsers=None)`` builders: given ``subparsers`` the
    verb is added there (as ``accel`` does), else a standalone ``accel VERB`` parser is made.
    """
    if subparsers is None:
        subparsers = AccelArgumentParser(prog="accel").add_subparsers()
    register(subparsers)
    return subparsers.choices[verb]

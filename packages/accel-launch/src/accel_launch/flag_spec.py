"""What one `accel launch` flag is (:class:`Flag`) and a titled group of them (:class:`Group`):
the declaration types the flag tables (:mod:`accel_launch.flags_core`,
:mod:`accel_launch.flags_plugins`) are written in, apart from what is built from the tables
(:mod:`accel_launch.flags`: the parser, lookups, value parsing), so the tables import no
module that imports them back. Imports neither torch nor accel_state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Flag", "Group"]


@dataclass(frozen=True)
class Flag:
    """One `accel launch` flag and where its value lives elsewhere."""

    opts: tuple[str, ...]
    """Option strings as declared (the hyphenated twin is added by the parser)."""
    help: str
    """Help text (also the docs' description)."""
    kind: str = "str"
    """switch (given = true), bool (takes true/false), int, float, str, choice or mapping (a
    YAML mapping in the config file, a JSON object on the command line)."""
    choices: tuple[str, ...] = ()
    """Allowed values of a ``choice`` flag."""
    default: Any = None
    """Value when neither the command line nor the config file gives one."""
    parser_default: Any = None
    """What the parsed namespace holds before resolution when the flag is not given, where
    Accelerate's parser shows a value there (code reads it before validating); resolution
    reads it as "not given", as Accelerate compares a value with its parser's default."""
    config: tuple[str, str] | None = None
    """``(section, key)`` in Accelerate's YAML; section "" is the top level."""
    env: str | None = None
    """Accelerate's name of the worker variable it sets (declared in accel_state.env)."""
    dest_name: str | None = None
    """Attribute name when it differs from the first long option."""
    unsupported: str | None = None
    """Why accel refuses this flag (TPU, SageMaker, Megatron-LM): the error's text."""
    inert: tuple[str, ...] = ()
    """Values (as ``str(value)``) of a refused flag that mean "off" — Accelerate's parser
    defaults, e.g. a Megatron-LM TP degree of 1 — so a namespace carrying them passes."""
    metavar: str | None = None

    @property
    def dest(self) -> str:
        if self.dest_name:
            return self.dest_name
        long = next(o for o in self.opts if o.startswith("--"))
        return long[2:].replace("-", "_")

    @property
    def name(self) -> str:
        return next(o for o in self.opts if o.startswith("--"))


@dataclass(frozen=True)
class Group:
    """A titled group of flags in the help and the docs."""

    title: str
    description: str
    flags: tuple[Flag, ...]

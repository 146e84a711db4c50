"""What ``accel strategies`` shows: the installed strategies and presets, and which one a
configuration would choose and why — read from the same declarations selection uses
(``priority``, ``claims``, ``check``, the options dataclass), never from a second table.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from dataclasses import dataclass, field
from typing import Any

from accel_state import AccelError

from accel_parallel.choosing import RunEnvironment, Unmet
from accel_parallel.option_types import OptionField, describe_fields
from accel_parallel.selection import (
    choose,
    report_unused,
    require_runnable,
    strategy_classes,
    strategy_presets,
)
from accel_parallel.strategy_registry import STRATEGIES

__all__ = ["Candidate", "Explanation", "ListedStrategy", "explain", "list_strategies"]


@dataclass(frozen=True)
class ListedStrategy:
    """One registered name: a strategy class or a preset."""

    name: str
    #: the distribution that registers it (``"(in code)"`` when registered by a script)
    package: str
    #: ``"strategy"`` or ``"preset"``
    kind: str
    #: the strategy's priority (a preset: its strategy's; presets are only built when named)
    priority: int
    #: the first line of its docstring, or the preset's description
    summary: str
    #: the options it takes as data, with types and defaults
    options: list[OptionField] = field(default_factory=list)
    #: a preset: the strategy it builds and the options it fixes
    builds: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)


def _packages() -> dict[str, str]:
    found = {}
    for entry_point in importlib.metadata.entry_points(group=STRATEGIES.group):
        dist = getattr(entry_point, "dist", None)
        found[entry_point.name.lower()] = dist.metadata["Name"] if dist is not None else "?"
    return found


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.splitlines()[0].replace("``", "`") if doc else ""


def list_strategies() -> list[ListedStrategy]:
    """Every registered strategy (by priority, highest first) then every preset (by name)."""
    packages = _packages()
    classes = strategy_classes()
    listed = [ListedStrategy(name, packages.get(name, "(in code)"), "strategy", cls.priority,
                             _summary(cls), describe_fields(cls.options_type()))
              for name, cls in sorted(classes.items(), key=lambda i: (-i[1].priority, i[0]))]
    for name, preset in sorted(strategy_presets().items()):
        target = classes.get(preset.strategy)
        listed.append(ListedStrategy(
            name, packages.get(name, "(in code)"), "preset",
            target.priority if target is not None else 0, preset.description,
            describe_fields(target.options_type()) if target is not None else [],
            builds=preset.strategy, fixed=dict(preset.options)))
    return listed


@dataclass(frozen=True)
class Candidate:
    """One strategy class as automatic selection asks it."""

    name: str
    priority: int
    #: whether it claims the configuration (None: its claims raised, see ``error``)
    claims: bool | None
    #: what its check finds missing here
    unmet: list[Unmet] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True)
class Explanation:
    """Which strategy a configuration would choose, how, and what would refuse it."""

    chosen: str | None
    route: str
    #: every strategy class by priority, as choosing by data asks them
    candidates: list[Candidate]
    #: the error the run would stop with (a check, an unused plugin, a bad option), if any
    refusal: str = ""


def explain(config: Any, environment: RunEnvironment) -> Explanation:
    """What :func:`~accel_parallel.select_strategy` would do with ``config`` in
    ``environment``, without building anything."""
    candidates = []
    for name, cls in sorted(strategy_classes().items(), key=lambda i: (-i[1].priority, i[0])):
        try:
            claims = bool(cls.claims(config))
            unmet = list(cls.check(config, environment)) if claims else []
            candidates.append(Candidate(name, cls.priority, claims, unmet))
        except Exception as error:  # a third party's hook: shown, never fatal here
            candidates.append(Candidate(name, cls.priority, None, error=str(error)))
    try:
        choice = choose(config)
    except AccelError as error:
        return Explanation(None, "", candidates, refusal=str(error))
    chosen = getattr(choice.cls, "name", choice.cls.__name__)
    try:
        require_runnable(choice, environment)
        report_unused(choice, config)
    except AccelError as error:
        return Explanation(chosen, choice.route, candidates, refusal=str(error))
    return Explanation(chosen, choice.route, candidates)

"""``--strategy`` / ``--strategy_config`` checked by the launcher, before any worker starts.

The strategy named is looked up in the ``accel.strategies`` entry-point group (the launcher
imports no strategy package by name: layer rules), and its options are handed to the
registered object's ``validate_options(options, source, registered_as)``, the same check
the workers run: an unknown name, key or a value of the wrong type is refused here in one
line, instead of once per worker as a traceback. Loading the entry point imports the
strategy's package (torch with it): this runs once per launch, never for ``accel --help``.
Where no strategy package is installed next to the launcher, the workers decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_state import ConfigurationError
from accel_state.registry import Registry

__all__ = ["REGISTERED", "check_named_strategy"]

#: strategies registered in code for the launcher's check (tests), beside the entry points
REGISTERED: dict[str, Any] = {}


def _strategies() -> Registry[Any]:
    """The ``accel.strategies`` entry points as installed now, read afresh on each check (a
    launcher called in a notebook or a test may see packages put on the path since), and
    :data:`REGISTERED`."""
    registry: Registry[Any] = Registry("accel.strategies", "strategy")
    for name, obj in REGISTERED.items():
        registry.register(name, obj)
    return registry


def check_named_strategy(name: str, options: Mapping[str, Any] | None, *, name_source: str,
                         options_source: str) -> None:
    """Refuse an unknown strategy ``name`` (listing the registered ones) and options its
    declared option types do not take; nothing when no strategy package is installed here."""
    strategies = _strategies()
    if not strategies.names():
        return
    try:
        registered = strategies.get(name)
    except ConfigurationError as error:
        raise ConfigurationError(f"--strategy {name!r} (from {name_source}): {error}") from None
    validate = getattr(registered, "validate_options", None)
    if validate is not None:
        validate(dict(options or {}), options_source, name)

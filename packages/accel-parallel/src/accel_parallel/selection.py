"""Choose the strategy from the resolved configuration, by data rather than by ``if``.

Every strategy registered in :data:`~accel_parallel.STRATEGIES` (entry-point group
``accel.strategies``) says from which configuration it builds itself
(:meth:`Strategy.accepts`); they are asked in order of :attr:`Strategy.priority`, so a new
backend adds a registry entry, not a branch. A strategy named explicitly (``ACCEL_STRATEGY``
or ``StrategyConfig.requested``; a config file's ``strategy:`` through the launcher) is built
without asking, with the options given by data (``ACCEL_STRATEGY_CONFIG``,
``StrategyConfig.options``) applied by its :meth:`Strategy.configure`. A name may be a
:class:`~accel_parallel.strategy_options.StrategyPreset`: a strategy plus fixed options.
"""

from __future__ import annotations

from accel_state import ConfigurationError, env

from accel_parallel.strategy import STRATEGIES, Strategy, StrategyConfig
from accel_parallel.strategy_options import (
    ENV_SOURCE,
    StrategyPreset,
    env_options,
    merge_preset_options,
)

__all__ = ["StrategyConfig", "resolve_name", "select_strategy",
           "strategy_classes", "strategy_handler_kinds", "strategy_presets"]


def strategy_handler_kinds() -> dict[type, str]:
    """Handler class -> kind, for the kwargs handlers registered strategies take
    (:attr:`Strategy.handler_kinds`); one kind claimed with two classes is refused."""
    kinds: dict[type, str] = {}
    owners: dict[str, tuple[str, type]] = {}
    for name, cls in _candidates():
        for kind, handler in getattr(cls, "handler_kinds", {}).items():
            seen = owners.setdefault(kind, (name, handler))
            if seen[1] is not handler:
                raise ConfigurationError(
                    f"Strategies {seen[0]} and {name} both take kwargs handlers of kind "
                    f"{kind!r} ({seen[1].__name__}, {handler.__name__}): rename one kind.")
            kinds[handler] = kind
    return kinds


def strategy_classes() -> dict[str, type[Strategy]]:
    """Every registered strategy class by name: :data:`STRATEGIES` without its presets."""
    return {name: obj for name, obj in STRATEGIES.load_all().items()
            if isinstance(obj, type) and issubclass(obj, Strategy)}


def _candidates() -> list[tuple[str, type[Strategy]]]:
    """The strategy classes asked by data (presets are only built when named), by priority."""
    return sorted(strategy_classes().items(),
                  key=lambda item: (-getattr(item[1], "priority", 0), item[0]))


def strategy_presets() -> dict[str, StrategyPreset]:
    """Every registered preset by name (``zero1``, ``zero2``, ``zero3``, third parties')."""
    return {name: obj for name, obj in STRATEGIES.load_all().items()
            if isinstance(obj, StrategyPreset)}


def resolve_name(name: str) -> tuple[type[Strategy], StrategyPreset | None]:
    """The strategy class a registered name builds, and the preset when the name is one;
    an unknown name is an error listing the registered ones."""
    found = STRATEGIES.get(name)
    if not isinstance(found, StrategyPreset):
        return found, None
    target = STRATEGIES.get(found.strategy)
    if not (isinstance(target, type) and issubclass(target, Strategy)):
        raise ConfigurationError(
            f"Preset {name!r} builds {found.strategy!r}, which is not a strategy class (a "
            "preset names a registered strategy, never another preset).")
    return target, found


def select_strategy(config: StrategyConfig) -> Strategy:
    """The strategy for ``config``: a ready instance the user gave (``plugins["strategy"]``),
    else the one requested by name, else the first (by priority) whose ``accepts(config)``
    is true."""
    strategy = _build(config)
    dynamo = config.plugins.get("dynamo")
    if dynamo is not None:  # (a ready instance keeps a plugin of its own otherwise)
        strategy.dynamo_plugin = dynamo
    return strategy


def _build(config: StrategyConfig) -> Strategy:
    ready = config.plugins.get("strategy")
    if ready is not None:  # a Strategy instance given where Accelerate takes a plugin
        return ready
    requested = config.requested or env.STRATEGY.get()
    options, source = ((dict(config.options), "StrategyConfig(options=...)")
                       if config.options is not None else (env_options(), ENV_SOURCE))
    if requested:
        return _build_named(requested, config, options, source)
    if options:
        raise ConfigurationError(
            f"{source} gives strategy options {sorted(options)}, but no strategy is named: "
            f"name the one they are for ({env.STRATEGY.name}=<name>, accel launch --strategy, "
            "a config file's strategy:).")
    accepting = [(name, cls) for name, cls in _candidates() if cls.accepts(config)]
    if accepting:
        name, cls = accepting[0]
        tied = [other for other, c in accepting[1:] if c.priority == cls.priority]
        if tied:  # never let the name order decide between backends
            raise ConfigurationError(
                f"Strategies {', '.join([name, *tied])} all accept this configuration with "
                f"the same priority ({cls.priority}): give one of them another priority, "
                f"or name the one to use with {env.STRATEGY.name}=<name>.")
        return cls.from_config(config)
    state = config.state
    raise ConfigurationError(
        f"No registered strategy accepts this configuration ({state.num_processes} process(es) "
        f"on {state.device}, plugins {sorted(config.plugins) or 'none'}); registered: "
        f"{', '.join(STRATEGIES.names())}. Install the package that provides one, or name one "
        f"with {env.STRATEGY.name}=<name>.")


def _build_named(name: str, config: StrategyConfig, options: dict, source: str) -> Strategy:
    """The strategy (or preset) registered as ``name``, configured with ``options``."""
    cls, preset = resolve_name(name)
    if preset is not None:
        options = merge_preset_options(name, preset, options, source)
        source = f"preset {name!r}" + (f" with {source}" if options != dict(preset.options)
                                       else "")
    return cls.from_config(cls.configure(config, options, source))

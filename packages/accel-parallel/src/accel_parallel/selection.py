"""Choose the strategy from the resolved configuration, by data rather than by ``if``.

Every strategy registered in :data:`~accel_parallel.STRATEGIES` (entry-point group
``accel.strategies``) says from which configuration it builds itself
(:meth:`Strategy.accepts`); they are asked in order of :attr:`Strategy.priority`, so a new
backend adds a registry entry, not a branch. A strategy named explicitly (``ACCEL_STRATEGY``
or ``StrategyConfig.requested``) is built without asking.
"""

from __future__ import annotations

from accel_state import ConfigurationError, env

from accel_parallel.strategy import STRATEGIES, Strategy, StrategyConfig

__all__ = ["StrategyConfig", "select_strategy", "strategy_handler_kinds"]


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


def _candidates() -> list[tuple[str, type[Strategy]]]:
    found = STRATEGIES.load_all()
    return sorted(found.items(), key=lambda item: (-getattr(item[1], "priority", 0), item[0]))


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
    if requested:
        return STRATEGIES.get(requested).from_config(config)
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

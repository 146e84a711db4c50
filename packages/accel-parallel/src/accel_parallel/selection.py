"""Choose the strategy from the resolved configuration, by data rather than by ``if``.

Every strategy registered in :data:`~accel_parallel.STRATEGIES` (entry-point group
``accel.strategies``) says which configuration is its own (:meth:`Strategy.claims`); they
are asked in order of :attr:`Strategy.priority`, so a new backend adds a registry entry,
not a branch. A strategy named explicitly (``ACCEL_STRATEGY`` or
``StrategyConfig.requested``; a config file's ``strategy:`` through the launcher) is taken
without asking, with the options given by data (``ACCEL_STRATEGY_CONFIG``,
``StrategyConfig.options``) applied by its :meth:`Strategy.configure`. A name may be a
:class:`~accel_parallel.strategy_options.StrategyPreset`: a strategy plus fixed options.
Whichever way it was chosen, its :meth:`Strategy.check` runs before it is built.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from accel_state import ConfigurationError, MissingDependencyError, env

from accel_parallel.choosing import RunEnvironment
from accel_parallel.strategy import STRATEGIES, Strategy, StrategyConfig
from accel_parallel.strategy_options import (
    ENV_SOURCE,
    StrategyPreset,
    env_options,
    merge_preset_options,
)

__all__ = ["Choice", "StrategyConfig", "choose", "report_unused", "require_runnable",
           "resolve_name", "select_strategy", "strategy_classes", "strategy_handler_kinds",
           "strategy_presets"]


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


@dataclass(frozen=True)
class Choice:
    """The strategy a configuration chose, before it is built: its class, how it was
    chosen (for messages), the configuration with its options applied, or the instance the
    user gave."""

    cls: type[Strategy]
    route: str
    config: StrategyConfig
    ready: Strategy | None = None


def select_strategy(config: StrategyConfig) -> Strategy:
    """The strategy for ``config``: a ready instance the user gave (``plugins["strategy"]``),
    else the one requested by name, else the first (by priority) that :meth:`claims
    <Strategy.claims>` ``config``. Whichever route chose it, its :meth:`check
    <Strategy.check>` runs before it is built, and a handler or plugin it does not take is
    reported (:func:`report_unused`)."""
    choice = choose(config)
    require_runnable(choice, RunEnvironment.of(config.state))
    report_unused(choice, config)
    strategy = choice.ready if choice.ready is not None else choice.cls.from_config(choice.config)
    dynamo = config.plugins.get("dynamo")
    if dynamo is not None:  # (a ready instance keeps a plugin of its own otherwise)
        strategy.dynamo_plugin = dynamo
    return strategy


def require_runnable(choice: Choice, environment: RunEnvironment) -> None:
    """Refuse the chosen strategy, in one error naming it, how it was chosen, each unmet
    condition and its fix, when its :meth:`check <Strategy.check>` finds any."""
    unmet = list(choice.cls.check(choice.config, environment))
    name = getattr(choice.cls, "name", choice.cls.__name__)
    missing = next((u for u in unmet if u.package), None)
    if missing is not None:
        raise MissingDependencyError(missing.package, extra=missing.extra,
                                     feature=f"strategy {name!r} ({choice.route})")
    if unmet:
        reasons = "; and ".join(f"{u.condition}. Fix: {u.fix}" for u in unmet)
        raise ConfigurationError(
            f"Strategy {name!r} ({choice.route}) cannot run here: {reasons}.")


def choose(config: StrategyConfig) -> Choice:
    """Which strategy ``config`` chooses and why, without building or checking it."""
    ready = config.plugins.get("strategy")
    requested, route = _requested(config)
    if ready is not None:  # a Strategy instance given where Accelerate takes a plugin
        if requested and not isinstance(ready, resolve_name(requested)[0]):
            raise ConfigurationError(
                f"A ready {type(ready).__name__} was given, but {route} names strategy "
                f"{requested!r}: name one (drop the instance, or the name).")
        return Choice(type(ready), "given as a Strategy instance", config, ready)
    options, source = ((dict(config.options), "StrategyConfig(options=...)")
                       if config.options is not None else (env_options(), ENV_SOURCE))
    if requested:
        return _choose_named(requested, route, config, options, source)
    if options:
        raise ConfigurationError(
            f"{source} gives strategy options {sorted(options)}, but no strategy is named: "
            f"name the one they are for ({env.STRATEGY.name}=<name>, accel launch --strategy, "
            "a config file's strategy:).")
    claiming = [(name, cls) for name, cls in _candidates() if cls.claims(config)]
    if claiming:
        name, cls = claiming[0]
        tied = [other for other, c in claiming[1:] if c.priority == cls.priority]
        if tied:  # never let the name order decide between backends
            raise ConfigurationError(
                f"Strategies {', '.join([name, *tied])} all claim this configuration with "
                f"the same priority ({cls.priority}): give one of them another priority, "
                f"or name the one to use with {env.STRATEGY.name}=<name>.")
        return Choice(cls, f"chosen by the configuration, priority {cls.priority}", config)
    state = config.state
    raise ConfigurationError(
        f"No registered strategy claims this configuration ({state.num_processes} process(es) "
        f"on {state.device}, plugins {sorted(config.plugins) or 'none'}); registered: "
        f"{', '.join(STRATEGIES.names())}. Install the package that provides one, or name one "
        f"with {env.STRATEGY.name}=<name>.")


def _requested(config: StrategyConfig) -> tuple[str | None, str]:
    """The name asked for and by whom; the code and the launcher naming two is an error."""
    variable = env.STRATEGY.get()
    by_variable = (f"named by {env.STRATEGY.name} (accel launch --strategy, a config file's "
                   "strategy:)")
    if config.requested and variable and config.requested.lower() != variable.lower():
        raise ConfigurationError(
            f"{config.requested_by} names strategy {config.requested!r}, but {by_variable} "
            f"names {variable!r}: name one (drop the argument, or the launch setting).")
    if config.requested:
        return config.requested, f"named by {config.requested_by}"
    return variable, by_variable


def _choose_named(name: str, route: str, config: StrategyConfig, options: dict,
                  source: str) -> Choice:
    """The strategy (or preset) registered as ``name``, its options checked and applied."""
    cls, preset = resolve_name(name)
    if preset is not None:
        options = merge_preset_options(name, preset, options, source)
        source = f"preset {name!r}" + (f" with {source}" if options != dict(preset.options)
                                       else "")
    options = cls.validate_options(options, source, name)
    return Choice(cls, route, cls.configure(config, options, source))


#: kwargs handler kinds of Accelerate's own API: Accelerate ignores one no strategy uses
#: (a script passes ``DistributedDataParallelKwargs`` and runs under FSDP too), so accel
#: warns, naming it; a kind only accel's strategies take is an error
_ACCELERATE_HANDLER_KINDS = {"ddp": "DistributedDataParallelKwargs"}
#: where each plugin kind a strategy runs with comes from, for messages
_PLUGIN_SOURCES = {
    "fsdp": "fsdp_plugin= or accel launch --use_fsdp",
    "deepspeed": "deepspeed_plugin(s)= or accel launch --use_deepspeed",
    "parallelism_config": "parallelism_config= or accel launch --use_parallelism_config",
    "tp": "torch_tp_plugin=",
}


def report_unused(choice: Choice, config: StrategyConfig) -> None:
    """A kwargs handler or plugin that some registered strategy takes, given while the chosen
    one does not take it, is never silently dropped: an error naming it, how the strategy
    was chosen and which strategies take it (a warning for Accelerate's own
    ``DistributedDataParallelKwargs``, which Accelerate ignores without a word)."""
    takes = set(getattr(choice.cls, "handler_kinds", {}))
    # every strategy compiles (dynamo); a ready instance is the strategy itself
    runs_with = set(getattr(choice.cls, "plugin_kinds", ())) | {"dynamo", "strategy"}
    handlers = {k: h for k, h in config.handlers.items() if h is not None and k not in takes}
    plugins = {k: p for k, p in config.plugins.items() if p is not None and k not in runs_with}
    if not handlers and not plugins:
        return  # everything given is taken: no need to load the other strategies
    classes = strategy_classes()
    name = getattr(choice.cls, "name", choice.cls.__name__)
    for kind, handler in handlers.items():
        takers = [n for n, c in classes.items() if kind in getattr(c, "handler_kinds", {})]
        if not takers:
            continue
        message = (f"kwargs_handlers=[{type(handler).__name__}(...)] is not used: strategy "
                   f"{name!r} ({choice.route}) does not take it; strategies that do: "
                   f"{', '.join(sorted(takers))}.")
        if kind in _ACCELERATE_HANDLER_KINDS:
            warnings.warn(message + " Drop it, or run under one of them.", UserWarning,
                          stacklevel=5)  # the user's Accelerator(...) line
            continue
        raise ConfigurationError(message + " Drop the handler, or choose one of them.")
    for kind in plugins:
        takers = [n for n, c in classes.items() if kind in getattr(c, "plugin_kinds", ())]
        if not takers:
            continue
        raise ConfigurationError(
            f"The {kind} plugin ({_PLUGIN_SOURCES.get(kind, kind)}) is not used: strategy "
            f"{name!r} ({choice.route}) does not run with it; strategies that do: "
            f"{', '.join(sorted(takers))}. Drop the plugin, or choose one of them.")

"""Strategies named and configured from outside the code: presets, and options as data.

A user who names a strategy (``ACCEL_STRATEGY``, ``accel launch --strategy``, a config
file's ``strategy:``) may give it options as plain data (``ACCEL_STRATEGY_CONFIG``: a JSON
object, from ``--strategy_config`` / ``strategy_config:``). They reach the strategy through
:meth:`Strategy.configure <accel_parallel.Strategy.configure>`: by default they are built
into the kwargs handler the strategy declares (:attr:`Strategy.handler_kinds`, a dataclass)
unless the code passed a handler of that kind — **the code wins over the file**.

A :class:`StrategyPreset` is a registered name for a strategy plus fixed options
(``zero3``: DeepSpeed with ZeRO stage 3). It registers in the same ``accel.strategies``
entry-point group as strategies, is built only when named (it never takes part in choosing
by data), and its options are applied the same way as a config file's.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_state import ConfigurationError, env

__all__ = ["StrategyPreset", "apply_handler_options", "apply_plugin_options", "build_options",
           "env_options", "merge_preset_options"]

#: where options read from the environment came from, for messages
ENV_SOURCE = (f"{env.STRATEGY_CONFIG.name} (accel launch --strategy_config, a config file's "
              "strategy_config:)")


@dataclass(frozen=True)
class StrategyPreset:
    """A registered name for a strategy with fixed options.

    Register one in the ``accel.strategies`` entry-point group like a strategy
    (``zero3 = "accel_parallel.presets:ZERO3"``); ``ACCEL_STRATEGY=zero3`` then builds the
    strategy registered as :attr:`strategy` with :attr:`options`.
    """

    #: the registered name of the strategy it builds (a strategy, never another preset)
    strategy: str
    #: the options it fixes, applied as a config file's ``strategy_config`` would be
    options: Mapping[str, Any] = field(default_factory=dict)
    #: one line for listings and docs
    description: str = ""

    def validate_options(self, options: Mapping[str, Any], source: str,
                         registered_as: str | None = None) -> dict[str, Any]:
        """The user's ``options`` merged with the fixed ones and checked against the
        strategy's option types (``accel launch`` calls it before any worker starts)."""
        from accel_parallel.strategy_registry import STRATEGIES

        name = registered_as or self.strategy
        cls = STRATEGIES.get(self.strategy)
        if isinstance(cls, StrategyPreset) or not hasattr(cls, "validate_options"):
            raise ConfigurationError(
                f"Preset {name!r} builds {self.strategy!r}, which is not a strategy class (a "
                "preset names a registered strategy, never another preset).")
        merged = merge_preset_options(name, self, options, source)
        return cls.validate_options(merged, f"preset {name!r} with {source}")


def env_options() -> dict[str, Any]:
    """``ACCEL_STRATEGY_CONFIG`` as a dict (empty when unset); not a JSON object: an error."""
    raw = env.STRATEGY_CONFIG.raw()
    if raw is None or not raw[1].strip():
        return {}
    name, text = raw
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigurationError(
            f"{name}={text!r} is not valid JSON ({error}); give a JSON object of the "
            'strategy\'s options, e.g. {"level": 2}.') from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"{name}={text!r} must be a JSON object of the strategy's options (option -> "
            f'value, e.g. {{"level": 2}}), not a {type(value).__name__}.')
    return value


def merge_preset_options(preset_name: str, preset: StrategyPreset,
                         options: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The preset's fixed options plus the user's; a user option that changes a fixed one is
    an error naming both (name the strategy itself to choose that option freely)."""
    for key, value in options.items():
        if key in preset.options and preset.options[key] != value:
            raise ConfigurationError(
                f"Preset {preset_name!r} fixes {key}={preset.options[key]!r}, but {source} "
                f"sets {key}={value!r}: drop it, or name the strategy "
                f"{preset.strategy!r} and give {key} there.")
    return {**preset.options, **options}


def build_options(cls: type, options: Mapping[str, Any], *, what: str, source: str) -> Any:
    """``cls(**options)`` for a dataclass ``cls``, each value checked against its field's type
    first (:func:`~accel_parallel.option_types.check_option_values`): an unknown option or a
    value of the wrong type is an error naming it."""
    from accel_parallel.option_types import check_option_values

    options = check_option_values(cls, options, what=what, source=source)
    try:
        return cls(**options)
    except TypeError as error:
        raise ConfigurationError(f"{source}: {cls.__name__}({error}); fix the option's "
                                 "value.") from None


def apply_handler_options(strategy: type, config: Any, options: Mapping[str, Any],
                          source: str) -> Any:
    """``config`` (a ``StrategyConfig``) with ``options`` built into ``strategy``'s handler (its one
    :attr:`~accel_parallel.Strategy.handler_kinds` entry; with several, ``options`` maps each
    kind to its options). A handler the code passed is kept, and a warning says the options
    were not used."""
    kinds = dict(getattr(strategy, "handler_kinds", {}))
    name = getattr(strategy, "name", strategy.__name__)
    if not kinds:
        raise ConfigurationError(
            f"{source} gives options {sorted(options)}, but strategy {name!r} takes none (it "
            "declares no handler_kinds): drop the options, or use a strategy that takes them.")
    if len(kinds) == 1:
        by_kind = {next(iter(kinds)): options}
    else:
        stray = [k for k in options if k not in kinds or not isinstance(options[k], Mapping)]
        if stray:
            raise ConfigurationError(
                f"Strategy {name!r} takes several handlers ({', '.join(kinds)}): {source} must "
                f"map each kind to its options ({{kind: {{option: value}}}}); "
                f"{', '.join(map(repr, stray))} is not one of them.")
        by_kind = dict(options)
    handlers = dict(config.handlers)
    for kind, values in by_kind.items():
        handler = kinds[kind]
        if kind in handlers:
            warnings.warn(
                f"{source} gives options for {handler.__name__}, but the code passed one "
                f"(kwargs_handlers=[{handler.__name__}(...)]): the code's is used.",
                UserWarning, stacklevel=4)
            continue
        handlers[kind] = build_options(handler, values, what=f"strategy {name!r}",
                                       source=source)
    return dataclasses.replace(config, handlers=handlers)


def apply_plugin_options(strategy: type, config: Any, options: Mapping[str, Any],
                         source: str) -> Any:
    """``config`` with ``options`` built into ``strategy``'s :attr:`options_class
    <accel_parallel.Strategy.options_class>` under its plugin kind (FSDP: a
    ``FullyShardedDataParallelPlugin``); a plugin of that kind the code passed is kept, and a
    warning says the options were not used."""
    kind, target = strategy.options_plugin, strategy.options_type()
    name = getattr(strategy, "name", strategy.__name__)
    if config.plugins.get(kind) is not None:
        warnings.warn(
            f"{source} gives options for {target.__name__}, but the code passed one ({kind} "
            "plugin): the code's is used.", UserWarning, stacklevel=4)
        return config
    plugin = build_options(target, options, what=f"strategy {name!r}", source=source)
    return dataclasses.replace(config, plugins={**config.plugins, kind: plugin})

"""How a strategy is chosen, checked and given options: the class-level half of the
Strategy interface (:class:`~accel_parallel.Strategy` inherits it).

Choosing asks two questions, kept apart so that every route runs the same check:

- :meth:`Choosable.claims` — *is this configuration mine?* Only automatic selection asks
  it, of every registered strategy by :attr:`~Choosable.priority`.
- :meth:`Choosable.check` — *can I run here?* (a process group, devices, an optional
  dependency). It is asked of the chosen strategy whichever way it was chosen: by data,
  by a kwargs handler, by name (``ACCEL_STRATEGY``, ``--strategy``, a config file's
  ``strategy:``, ``Accelerator(strategy=...)``) or as a ready instance; each unmet
  condition comes back with its fix (:class:`Unmet`), and the selection refuses the run
  naming the strategy, the condition and the fix.

``accepts(config)``, the single question of earlier releases, stays as a deprecated
alias (``claims`` and a passing ``check``); a strategy that only overrides ``accepts``
keeps being chosen by it.

Options given as data are typed: a strategy declares them as a dataclass
(:attr:`~Choosable.options_class`, else its one :attr:`~Choosable.handler_kinds` class),
and :meth:`~Choosable.validate_options` checks them field by field
(:mod:`accel_parallel.option_types`) — in the workers and, before they start, in
``accel launch``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from accel_state import ConfigurationError

from accel_parallel.option_types import check_option_values
from accel_parallel.strategy_options import apply_handler_options, apply_plugin_options

__all__ = ["Choosable", "RunEnvironment", "Unmet", "distributed_unmet"]


@dataclass(frozen=True)
class RunEnvironment:
    """Where the run is, as a strategy's :meth:`~Choosable.check` sees it (not how it is
    configured: that is the ``StrategyConfig``)."""

    #: processes in the run (``WORLD_SIZE``)
    num_processes: int
    #: the device type the processes run on (``"cpu"``, ``"cuda"``, ...)
    device_type: str
    #: whether a default ``torch.distributed`` process group exists
    process_group: bool

    @classmethod
    def of(cls, state: Any) -> RunEnvironment:
        """The environment of a process state (a ``PartialState``)."""
        import torch.distributed as dist

        group = dist.is_available() and dist.is_initialized()
        return cls(num_processes=state.num_processes, device_type=state.device.type,
                   process_group=group)


@dataclass(frozen=True)
class Unmet:
    """A condition a strategy needs that the run does not meet, and how to meet it."""

    #: what is needed and what the run has instead
    condition: str
    #: what the user does about it
    fix: str
    #: the optional package that is missing, when that is the condition (the refusal is then
    #: a ``MissingDependencyError`` with its ``pip install "accel[extra]"`` line)
    package: str | None = None
    extra: str | None = None


def distributed_unmet(what: str) -> list[Unmet]:
    """The condition of a strategy that makes its own process group (one process gets one of
    its own): a torch build with ``torch.distributed``."""
    import torch.distributed as dist

    if dist.is_available():
        return []
    return [Unmet(f"{what} needs torch.distributed, which this torch build lacks",
                  "install a torch build with distributed support")]


class Choosable:
    """Class-level declarations and hooks by which a strategy is chosen and configured."""

    name: ClassVar[str] = "base"
    #: Order in which automatic selection asks strategies whether they :meth:`claims` a
    #: configuration (highest first; two that claim one with the same priority are refused).
    priority: ClassVar[int] = 0
    #: The kwargs handlers this strategy takes, by kind: ``Accelerator(kwargs_handlers=
    #: [handler])`` files an instance of one under its kind in ``StrategyConfig.handlers``, so
    #: a strategy from another package is chosen and configured through Accelerate's own
    #: argument. A handler of a kind the selected strategy does not take is reported.
    handler_kinds: ClassVar[Mapping[str, type]] = {}
    #: The parallelism plugin kinds it runs with (``"fsdp"``, ``"deepspeed"``, ...); one given
    #: that the selected strategy does not run with is refused rather than ignored.
    plugin_kinds: ClassVar[frozenset[str]] = frozenset()
    #: The dataclass of the options it takes as data (``--strategy_config``, a preset's);
    #: None: its one :attr:`handler_kinds` class, if it has exactly one.
    options_class: ClassVar[type | None] = None
    #: Where :attr:`options_class` goes once built: a plugin kind (built into
    #: ``StrategyConfig.plugins``), else None (a kwargs handler of :attr:`handler_kinds`).
    options_plugin: ClassVar[str | None] = None

    # -- choosing ------------------------------------------------------------------------------
    @classmethod
    def claims(cls, config: Any) -> bool:
        """Whether ``config`` is this strategy's (automatic selection asks it). Whether it
        can run here is :meth:`check`'s question, asked whichever way it was chosen. The base
        claims nothing: a strategy only used when named needs nothing more."""
        if _overrides(cls, "accepts"):  # written against the one-question interface
            _warn_accepts(cls)
            return bool(cls.accepts(config))
        return False

    @classmethod
    def check(cls, config: Any, environment: RunEnvironment) -> Sequence[Unmet]:
        """The conditions this strategy needs that ``environment`` does not meet (empty when
        it can run): asked of the chosen strategy on every route, before it is built."""
        return ()

    @classmethod
    def accepts(cls, config: Any) -> bool:
        """Deprecated: :meth:`claims` and :meth:`check` (kept for strategies written
        against it). True when this strategy claims ``config`` and can run here."""
        if not cls.claims(config):
            return False
        return not cls.check(config, RunEnvironment.of(config.state))

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Any) -> Any:
        """Build this strategy from the resolved configuration."""
        return cls(config.state, precision=config.precision)  # type: ignore[call-arg]

    @classmethod
    def options_type(cls) -> type | None:
        """The dataclass its options given as data are checked against (None: it takes none,
        or several handlers, each checked by kind)."""
        if cls.options_class is not None:
            return cls.options_class
        kinds = list(cls.handler_kinds.values())
        return kinds[0] if len(kinds) == 1 else None

    @classmethod
    def validate_options(cls, options: Mapping[str, Any], source: str,
                         registered_as: str | None = None) -> dict[str, Any]:
        """``options`` checked against :meth:`options_type` (by kind for a strategy with
        several handlers), converted where a field's type says; one line naming the key,
        the value and the expected type otherwise. ``accel launch`` calls it before any
        worker starts (through the entry point, as for a preset)."""
        what = f"strategy {registered_as or cls.name!r}"
        if not options:
            return {}
        target = cls.options_type()
        if target is not None:
            return check_option_values(target, options, what=what, source=source)
        if not cls.handler_kinds:
            raise ConfigurationError(
                f"{source} gives options {sorted(options)}, but {what} takes none (it declares "
                "no options_class or handler_kinds): drop the options, or use a strategy that "
                "takes them.")
        checked = {}
        for kind, values in options.items():
            if kind not in cls.handler_kinds or not isinstance(values, Mapping):
                raise ConfigurationError(
                    f"{what} takes several handlers ({', '.join(cls.handler_kinds)}): {source} "
                    f"must map each kind to its options ({{kind: {{option: value}}}}); "
                    f"{kind!r} is not one of them.")
            checked[kind] = check_option_values(cls.handler_kinds[kind], values, what=what,
                                                source=f"{source} [{kind}]")
        return checked

    @classmethod
    def configure(cls, config: Any, options: Mapping[str, Any],
                  source: str) -> Any:
        """``config`` with ``options`` given by data (a config file's ``strategy_config``,
        ``ACCEL_STRATEGY_CONFIG``, a preset's) applied; ``source`` names them in errors. They
        build :attr:`options_class` into its plugin kind (:attr:`options_plugin`), else the
        :attr:`handler_kinds` dataclass, unless the code passed one (the code wins)."""
        if not options:
            return config
        if cls.options_plugin is not None:
            return apply_plugin_options(cls, config, options, source)
        return apply_handler_options(cls, config, options, source)


def _overrides(cls: type, method: str) -> bool:
    own = getattr(cls, method).__func__
    return own is not getattr(Choosable, method).__func__


_warned: set[type] = set()


def _warn_accepts(cls: type) -> None:
    if cls in _warned:
        return
    _warned.add(cls)
    warnings.warn(
        f"{cls.__name__} overrides Strategy.accepts, which is deprecated: override claims("
        "config) (is this configuration mine) and check(config, environment) (can it run "
        "here) instead; accepts is still asked as its claims.", DeprecationWarning,
        stacklevel=4)

"""What Accelerate's ``AcceleratorState`` reports about the parallelism, decided here.

``AcceleratorState`` shows the plugins under Accelerate's attribute names (``fsdp_plugin``,
``deepspeed_plugins`` by name, ...), the run type and whether models are sharded
(``is_fsdp2``). Which plugin kind lands in which attribute, in which shape, and what a
helper decorated as needing one run type refuses are backend facts: the facade's
``AcceleratorState`` fills itself from a :class:`RunView` (:func:`strategy_view` once a
strategy runs, :func:`requested_view` from the plugins given before any) and asks the
functions below, so it names no backend (issue 40.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accel_state import ConfigurationError, DistributedType

from accel_parallel.plugins import requested_distributed_type

if TYPE_CHECKING:
    from accel_parallel.strategy import Strategy

__all__ = ["PLUGIN_ATTRIBUTES", "RunView", "plugin_named", "refuse_other_runs",
           "refuse_unsupported_plugins", "requested_view", "selected_plugin", "strategy_view"]

#: plugin kind (``StrategyConfig.plugins``, ``Strategy.plugins_in_use``) -> the attribute
#: ``AcceleratorState`` shows it as
_ATTRIBUTE_OF_KIND = {"dynamo": "dynamo_plugin", "deepspeed": "deepspeed_plugins",
                      "fsdp": "fsdp_plugin", "tp": "torch_tp_plugin",
                      "parallelism_config": "parallelism_config"}
#: Accelerate's plugin attributes that accel never fills (it runs no Megatron-LM)
_ALWAYS_NONE = ("megatron_lm_plugin",)
#: every plugin attribute of ``AcceleratorState``
PLUGIN_ATTRIBUTES = frozenset({*_ATTRIBUTE_OF_KIND.values(), *_ALWAYS_NONE})

#: Accelerate's decorators for helpers that only make sense under one run type: the run type,
#: what it is called, and how a script gets it
_REQUIRED_RUNS = {
    "deepspeed_required": (DistributedType.DEEPSPEED, "DeepSpeed",
                           "deepspeed_plugin=DeepSpeedPlugin(...) (or `accel launch "
                           "--use_deepspeed`)"),
}


@dataclass(frozen=True)
class RunView:
    """The run as ``AcceleratorState`` reports it."""

    distributed_type: DistributedType
    #: Accelerate's ``is_fsdp2`` (``Strategy.shards_parameters``)
    shards_parameters: bool
    #: :data:`PLUGIN_ATTRIBUTES` -> the plugin (None when absent)
    plugins: dict[str, Any] = field(default_factory=dict)
    device_mesh: Any = None


def _attributes(plugins: Mapping[str, Any]) -> dict[str, Any]:
    """Plugins by kind -> by ``AcceleratorState`` attribute; a lone DeepSpeed plugin is
    named ``"default"`` (Accelerate's ``deepspeed_plugins`` is always by name)."""
    found = {attr: plugins.get(kind) for kind, attr in _ATTRIBUTE_OF_KIND.items()}
    found.update(dict.fromkeys(_ALWAYS_NONE))
    named = found["deepspeed_plugins"]
    if named is not None and not isinstance(named, Mapping):
        named = {"default": named}
    found["deepspeed_plugins"] = dict(named) if named else None
    return found


def strategy_view(strategy: Strategy, plugins: Mapping[str, Any]) -> RunView:
    """The run of a chosen strategy: its answers, and the plugins it runs with (also those
    it built itself) over the ones resolved from the arguments."""
    used = {**plugins, **strategy.plugins_in_use}
    return RunView(distributed_type=strategy.distributed_type,
                   shards_parameters=bool(strategy.shards_parameters),
                   plugins=_attributes(used), device_mesh=getattr(strategy, "device_mesh", None))


def requested_view(default: DistributedType, *, dynamo_plugin: Any = None,
                   deepspeed_plugin: Any = None, fsdp_plugin: Any = None,
                   torch_tp_plugin: Any = None, parallelism_config: Any = None) -> RunView:
    """The run ``AcceleratorState(...)`` built before any ``Accelerator`` reports: the type
    the plugins (or the launcher's variables) ask for, else ``default``; sharded when FSDP
    is asked for with a plugin."""
    run_type = requested_distributed_type(default, fsdp=fsdp_plugin, deepspeed=deepspeed_plugin)
    plugins = {"dynamo": dynamo_plugin, "deepspeed": deepspeed_plugin, "fsdp": fsdp_plugin,
               "tp": torch_tp_plugin, "parallelism_config": parallelism_config}
    return RunView(distributed_type=run_type,
                   shards_parameters=run_type is DistributedType.FSDP and fsdp_plugin is not None,
                   plugins=_attributes(plugins))


def refuse_unsupported_plugins(where: str, *, megatron_lm_plugin: Any = None) -> None:
    """Accelerate's arguments for plugins accel does not run, refused with the way it does
    instead (``where``: ``"Accelerator"``, ``"AcceleratorState"``)."""
    from accel_parallel.megatron import refuse_megatron_plugin

    refuse_megatron_plugin(megatron_lm_plugin, where)


def selected_plugin(family: Mapping[str, Any] | None) -> Any:
    """The active plugin of a named family (``deepspeed_plugins``): the selected one, else
    the first; None for no family."""
    if not family:
        return None
    selected = [p for p in family.values() if getattr(p, "selected", False)]
    return selected[0] if selected else next(iter(family.values()))


def plugin_named(family: Mapping[str, Any] | None, name: str) -> Any:
    """The plugin registered as ``name`` (``Accelerator(deepspeed_plugins=...)``)."""
    family = family or {}
    if name not in family:
        raise ConfigurationError(
            f"No DeepSpeed plugin named {name!r}; the Accelerator has "
            f"{sorted(family) or 'none'}.")
    return family[name]


def refuse_other_runs(decorator: str, function: str, running: Any) -> None:
    """``function``, decorated with Accelerate's ``decorator`` (``deepspeed_required``),
    called in a run of another type: an error naming the fix."""
    run_type, needs, fix = _REQUIRED_RUNS[decorator]
    if running != run_type:
        raise ConfigurationError(
            f"{function} needs {needs}, but this run's Accelerator uses {running}: build the "
            f"Accelerator with {fix}.")

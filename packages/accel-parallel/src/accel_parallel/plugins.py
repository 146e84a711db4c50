"""The Accelerator's parallelism arguments resolved into plugins by kind — here, beside the
strategies that read them, so the facade forwards its arguments and knows no backend.

:func:`resolve_plugins` turns ``fsdp_plugin=``, ``deepspeed_plugin(s)=``,
``parallelism_config=``, ``torch_tp_plugin=`` and ``dynamo_backend=`` / ``dynamo_plugin=``
(or the ``ACCELERATE_USE_*`` variables the launcher sets) into the
``StrategyConfig.plugins`` mapping the strategies ``claims``: ``"fsdp"``, ``"deepspeed"``
(name -> ``DeepSpeedPlugin``), ``"parallelism_config"``, ``"tp"``, ``"dynamo"`` (and
``"strategy"``: a strategy instance the user built, used as it is). Which kinds
cannot run together is declared once, in :data:`EXCLUSIVE` (:func:`conflicts`); which
variable turns a kind on and which run type it makes, in :data:`LAUNCH_KINDS` (read by the
resolution and by :func:`requested_distributed_type`, the facade's ``AcceleratorState``
before any strategy exists). DeepSpeed's module is imported only when DeepSpeed is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accel_state import ConfigurationError, DistributedType, env

from accel_parallel.compile import DynamoBackend, TorchDynamoPlugin
from accel_parallel.strategy import Strategy

if TYPE_CHECKING:
    from accel_parallel.deepspeed.plugin import DeepSpeedPlugin

__all__ = ["EXCLUSIVE", "LAUNCH_KINDS", "ResolvedPlugins", "conflicts", "enabled",
           "requested_distributed_type", "resolve_plugins", "resolve_dynamo"]

#: Plugin kind -> the kinds that cannot run with it: DeepSpeed shards the model its own way.
#: The one declaration: the facade's resolution, the DeepSpeed strategy and the mesh
#: strategy's ``claims`` all read it.
EXCLUSIVE: Mapping[str, frozenset[str]] = {
    "deepspeed": frozenset({"fsdp", "parallelism_config", "tp"}),
}


#: Plugin kind -> (the ``ACCELERATE_USE_*`` variable `accel launch` sets to turn it on, the run
#: type it makes, or None when the strategy decides): in order of strength, the last given
#: wins the run type (DeepSpeed over FSDP, as Accelerate has it).
LAUNCH_KINDS: Mapping[str, tuple[env.EnvVar, DistributedType | None]] = {
    "parallelism_config": (env.USE_PARALLELISM_CONFIG, None),
    "fsdp": (env.USE_FSDP, DistributedType.FSDP),
    "deepspeed": (env.USE_DEEPSPEED, DistributedType.DEEPSPEED),
}


def enabled(kind: str, given: Any) -> bool:
    """Whether plugin ``kind`` is on: given in code, or its launcher variable is true."""
    return given is not None or LAUNCH_KINDS[kind][0].get_bool(False)


def requested_distributed_type(default: DistributedType, **given: Any) -> DistributedType:
    """The run type plugins ask for before a strategy is built (``AcceleratorState(...)``
    made before an ``Accelerator``): each kind of :data:`LAUNCH_KINDS` given by keyword
    (``fsdp=``, ``deepspeed=``) or turned on by its variable, the strongest winning; else
    ``default`` (the process state's type)."""
    found = default
    for kind, (_, run_type) in LAUNCH_KINDS.items():
        if run_type is not None and enabled(kind, given.get(kind)):
            found = run_type
    return found


def conflicts(kind: str, plugins: Mapping[str, Any]) -> list[str]:
    """The kinds present in ``plugins`` that cannot run together with ``kind`` (sorted)."""
    banned = set(EXCLUSIVE.get(kind, ())) | {k for k, others in EXCLUSIVE.items() if kind in others}
    return sorted(k for k in banned if plugins.get(k) is not None)


@dataclass
class ResolvedPlugins:
    """The plugins by kind, and the accumulation count after the plugins had their say
    (a DeepSpeed config's ``gradient_accumulation_steps`` when the Accelerator gave none)."""

    plugins: dict[str, Any] = field(default_factory=dict)
    accumulation_steps: int = 1


def resolve_plugins(*, fsdp_plugin: Any = None, deepspeed_plugin: Any = None,
                    deepspeed_plugins: Any = None, parallelism_config: Any = None,
                    torch_tp_plugin: Any = None, dynamo_backend: Any = None,
                    dynamo_plugin: Any = None, accumulation_steps: int = 1) -> ResolvedPlugins:
    """The parallelism plugins by kind, from the arguments or the environment
    (``ACCELERATE_USE_FSDP=true`` builds the FSDP plugin from the ``FSDP_*`` variables,
    ``ACCELERATE_USE_DEEPSPEED=true`` the DeepSpeed plugin, ``ACCELERATE_USE_PARALLELISM_CONFIG``
    the ``ParallelismConfig``); FSDP with DeepSpeed (:data:`EXCLUSIVE`) is an error naming
    both sources. A ready :class:`Strategy` instance where Accelerate takes a plugin
    (``fsdp_plugin=``, ``deepspeed_plugin=``, ``torch_tp_plugin=``) is the run's strategy
    (``"strategy"``), used as it is."""
    resolved = ResolvedPlugins(accumulation_steps=accumulation_steps)
    plugins = resolved.plugins
    arguments = {"fsdp_plugin": fsdp_plugin, "deepspeed_plugin": deepspeed_plugin,
                 "torch_tp_plugin": torch_tp_plugin, "deepspeed_plugins": deepspeed_plugins,
                 "parallelism_config": parallelism_config}
    ready = [name for name, value in arguments.items() if isinstance(value, Strategy)]
    if ready:
        others = [name for name, value in arguments.items()
                  if value is not None and name != ready[0]]
        if others:
            raise ConfigurationError(
                f"Accelerator({ready[0]}=<{type(arguments[ready[0]]).__name__}>) is a ready "
                f"strategy, which runs the models by itself, but {', '.join(others)} was given "
                "too; pass the strategy alone (configure it when you build it).")
        plugins["strategy"] = arguments[ready[0]]
        dynamo = resolve_dynamo(dynamo_backend, dynamo_plugin)
        if dynamo.enabled:
            plugins["dynamo"] = dynamo
        return resolved
    deepspeed = resolve_deepspeed(deepspeed_plugin, deepspeed_plugins)
    if deepspeed is not None:
        resolved.accumulation_steps = _agree_on_accumulation(deepspeed, accumulation_steps)
        plugins["deepspeed"] = deepspeed
    fsdp_from_env = fsdp_plugin is None and enabled("fsdp", None)
    fsdp_given = fsdp_plugin is not None or fsdp_from_env
    if deepspeed is not None and conflicts("deepspeed", {"fsdp": True if fsdp_given else None}):
        source = "fsdp_plugin=" if fsdp_plugin is not None else "{}={}".format(*env.USE_FSDP.raw())
        raise ConfigurationError(
            f"FSDP and DeepSpeed are both enabled ({source} and a DeepSpeed plugin): they "
            "shard the model in different ways; choose one of them.")
    dynamo = resolve_dynamo(dynamo_backend, dynamo_plugin)
    if dynamo.enabled:
        plugins["dynamo"] = dynamo
    if fsdp_from_env:
        from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

        fsdp_plugin = FullyShardedDataParallelPlugin()
    if fsdp_plugin is not None:
        from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

        if not isinstance(fsdp_plugin, FullyShardedDataParallelPlugin):
            raise ConfigurationError(
                f"Accelerator(fsdp_plugin={fsdp_plugin!r}) must be a "
                "FullyShardedDataParallelPlugin: build one with "
                "accel.FullyShardedDataParallelPlugin(sharding_strategy=..., ...).")
        plugins["fsdp"] = fsdp_plugin
    plugins.update(_parallelism_plugins(parallelism_config, torch_tp_plugin))
    return resolved


def resolve_dynamo(backend: Any, plugin: Any) -> TorchDynamoPlugin:
    """How prepared models are compiled: ``dynamo_plugin=``, else ``dynamo_backend=``, else
    the ``ACCELERATE_DYNAMO_*`` variables (``accel launch --dynamo_backend``)."""
    if plugin is not None:
        if backend is not None:
            raise ConfigurationError(
                f"Accelerator got both dynamo_backend={backend!r} and dynamo_plugin={plugin!r}; "
                "pass one: the backend as TorchDynamoPlugin(backend=...) with the other options.")
        if not isinstance(plugin, TorchDynamoPlugin):
            raise ConfigurationError(
                f"Accelerator(dynamo_plugin={plugin!r}) must be a TorchDynamoPlugin: build one "
                "with accel.utils.TorchDynamoPlugin(backend=..., mode=...).")
        return plugin
    if backend is None:
        return TorchDynamoPlugin()
    return TorchDynamoPlugin(backend=DynamoBackend.parse(backend, "Accelerator(dynamo_backend)"))


def resolve_deepspeed(deepspeed_plugin: Any, deepspeed_plugins: Any
                      ) -> dict[str, DeepSpeedPlugin] | None:
    """The DeepSpeed plugins by name (a single one is ``"default"``), or None without
    DeepSpeed: ``deepspeed_plugin=`` takes a plugin, a plain dict of its fields or a dict of
    name -> plugin (Accelerate's multi-model form, also ``deepspeed_plugins=``);
    ``ACCELERATE_USE_DEEPSPEED`` builds one from the ``ACCELERATE_DEEPSPEED_*`` variables."""
    if deepspeed_plugin is not None and deepspeed_plugins is not None:
        raise ConfigurationError("Accelerator got both deepspeed_plugin= and deepspeed_plugins=: "
                                 "give several named plugins as deepspeed_plugins only.")
    given = deepspeed_plugins if deepspeed_plugins is not None else deepspeed_plugin
    if not enabled("deepspeed", given):
        return None
    from accel_parallel.deepspeed.plugin import DeepSpeedPlugin  # only when DeepSpeed is asked for

    if given is None:
        given = DeepSpeedPlugin()
    plugins = [v for v in given.values()] if isinstance(given, dict) else []
    if isinstance(given, DeepSpeedPlugin):
        named = {"default": given}
    elif isinstance(given, dict) and given and all(isinstance(v, DeepSpeedPlugin) for v in plugins):
        named = dict(given)
    elif isinstance(given, dict) and deepspeed_plugins is None and not any(
            isinstance(v, DeepSpeedPlugin) for v in plugins):
        named = {"default": DeepSpeedPlugin.from_dict(given)}
    else:
        arg = "deepspeed_plugins" if deepspeed_plugins is not None else "deepspeed_plugin"
        raise ConfigurationError(
            f"Accelerator({arg}={given!r}) must be a DeepSpeedPlugin, a dict of its fields "
            "({'zero_stage': 2, ...}) or a non-empty dict of name -> DeepSpeedPlugin.")
    for plugin in named.values():
        plugin._family = named
    return named


def _agree_on_accumulation(plugins: dict[str, DeepSpeedPlugin], steps: int) -> int:
    """A plugin's accumulation steps become the Accelerator's when it gave none (1); two
    different counts are an error naming both. Returns the count to use."""
    for name, plugin in plugins.items():
        count = plugin.get_value("gradient_accumulation_steps")
        if not isinstance(count, int) or isinstance(count, bool):
            continue  # "auto": filled from the Accelerator at prepare
        if steps == 1 and count != 1:
            steps = count
        elif count != steps:
            raise ConfigurationError(
                f"Two gradient accumulation counts: the Accelerator's gradient_accumulation_steps"
                f"={steps} and the DeepSpeed config's gradient_accumulation_steps={count} (plugin "
                f"{name!r}). Give it in one place, or make them agree.")
    return steps


def _parallelism_plugins(parallelism_config: Any, torch_tp_plugin: Any) -> dict[str, Any]:
    """``{"parallelism_config": ..., "tp": ...}`` from the arguments, or a configuration built
    from ``PARALLELISM_CONFIG_*`` when ``ACCELERATE_USE_PARALLELISM_CONFIG`` is set."""
    from accel_parallel.mesh.parallelism_config import ParallelismConfig, TorchTensorParallelPlugin

    plugins: dict[str, Any] = {}
    if parallelism_config is None and enabled("parallelism_config", None):
        parallelism_config = ParallelismConfig()
    if parallelism_config is not None:
        if not isinstance(parallelism_config, ParallelismConfig):
            raise ConfigurationError(
                f"Accelerator(parallelism_config={parallelism_config!r}) must be a "
                "ParallelismConfig: build one with accel.ParallelismConfig(dp_shard_size=..., "
                "tp_size=...).")
        plugins["parallelism_config"] = parallelism_config
    if torch_tp_plugin is not None:
        if not isinstance(torch_tp_plugin, TorchTensorParallelPlugin):
            raise ConfigurationError(
                f"Accelerator(torch_tp_plugin={torch_tp_plugin!r}) must be a "
                "TorchTensorParallelPlugin (deprecated: prefer "
                "parallelism_config=ParallelismConfig(tp_size=...)).")
        plugins["tp"] = torch_tp_plugin
    return plugins

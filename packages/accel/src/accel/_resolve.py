"""Turn the Accelerator's arguments into the objects it delegates to — in one place.

DESIGN.md §4: arguments are resolved once, here, into a Precision and then a Strategy
(which receives the precision). The Accelerator itself never branches on a concrete
backend.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from accel_parallel import (
    DistributedDataParallelKwargs,
    Strategy,
    StrategyConfig,
    select_strategy,
    strategy_handler_kinds,
)
from accel_parallel.plugins import resolve_plugins as _resolve_plugins
from accel_parallel.state_view import refuse_unsupported_plugins
from accel_precision import (
    AORecipeKwargs,
    AutocastKwargs,
    GradScalerKwargs,
    Precision,
    TERecipeKwargs,
    build_precision,
)
from accel_state import (
    ConfigurationError,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    KwargsHandler,
    PartialState,
)

from accel._profiling import ProfileKwargs

__all__ = ["Handlers", "collect_handlers", "resolve_precision", "resolve_accumulation",
           "resolve_plugins", "resolve_strategy", "reject_unknown_arguments",
           "refuse_unsupported_plugins"]

#: arguments Accelerate took (or takes) that accel receives another way
_MOVED_ARGUMENTS = {
    "dispatch_batches": "dataloader_config=DataLoaderConfiguration(dispatch_batches=...)",
    "even_batches": "dataloader_config=DataLoaderConfiguration(even_batches=...)",
    "use_seedable_sampler": "dataloader_config=DataLoaderConfiguration(use_seedable_sampler=...)",
}


def reject_unknown_arguments(unknown: dict[str, Any], init: Callable[..., Any]) -> None:
    """A ``TypeError`` for keyword arguments ``Accelerator(...)`` does not take, naming the
    closest valid one (``mixed_precison=`` -> ``mixed_precision``) or where it moved."""
    if not unknown:
        return
    valid = [name for name, p in inspect.signature(init).parameters.items()
             if name != "self" and p.kind is not p.VAR_KEYWORD]
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        if name in _MOVED_ARGUMENTS:
            problems.append(f"{name!r} (pass {_MOVED_ARGUMENTS[name]})")
        elif close:
            problems.append(f"{name!r} (did you mean {close[0]!r}?)")
        else:
            problems.append(f"{name!r}")
    plural = "s" if len(problems) > 1 else ""
    raise TypeError(f"Accelerator() got unexpected keyword argument{plural} "
                    f"{', '.join(problems)}; its arguments are: {', '.join(valid)}.")


@dataclass
class Handlers:
    """The kwargs handlers a user passed, at most one of each kind."""

    init_process_group: InitProcessGroupKwargs | None = None
    ddp: DistributedDataParallelKwargs | None = None
    # -- mixed precision (accel_precision) --
    autocast: AutocastKwargs | None = None
    grad_scaler: GradScalerKwargs | None = None
    ao_recipe: AORecipeKwargs | None = None
    te_recipe: TERecipeKwargs | None = None  # FP8RecipeKwargs (deprecated) lands here too
    # -- Accelerator.profile() --
    profile: ProfileKwargs | None = None
    # -- handlers registered strategies take (Strategy.handler_kinds), by kind --
    strategy: dict[str, Any] = field(default_factory=dict)

    def by_kind(self) -> dict[str, Any]:
        """Every handler given, by kind (its slot's name, or its strategy's kind)."""
        given = {slot: getattr(self, slot) for slot in _HANDLER_SLOTS.values()}
        return {**{k: v for k, v in given.items() if v is not None}, **self.strategy}


_HANDLER_SLOTS = {InitProcessGroupKwargs: "init_process_group",
                  DistributedDataParallelKwargs: "ddp",
                  AutocastKwargs: "autocast", GradScalerKwargs: "grad_scaler",
                  AORecipeKwargs: "ao_recipe", TERecipeKwargs: "te_recipe",
                  ProfileKwargs: "profile"}


def collect_handlers(kwargs_handlers: Iterable[Any] | None) -> Handlers:
    """Sort handlers into their slots; a duplicate or an unknown object is an error."""
    handlers = Handlers()
    strategy_kinds: dict[type, str] | None = None
    for handler in kwargs_handlers or ():
        slot = next((name for cls, name in _HANDLER_SLOTS.items()
                     if isinstance(handler, cls)), None)
        if slot is None:  # one a registered strategy takes?
            strategy_kinds = strategy_kinds if strategy_kinds is not None \
                else strategy_handler_kinds()
            kind = next((k for cls, k in strategy_kinds.items() if isinstance(handler, cls)),
                        None)
            if kind is not None:
                if kind in handlers.strategy:
                    raise ConfigurationError(
                        f"Accelerator(kwargs_handlers=...) got more than one "
                        f"{type(handler).__name__}; pass each kind of handler once.")
                handlers.strategy[kind] = handler
                continue
            known = ", ".join([*(cls.__name__ for cls in _HANDLER_SLOTS),
                               *(cls.__name__ for cls in strategy_kinds)])
            kind = "kwargs handler" if isinstance(handler, KwargsHandler) else "object"
            raise ConfigurationError(
                f"Accelerator(kwargs_handlers=...) got an unsupported {kind} {handler!r}; "
                f"supported handlers: {known}."
            )
        if getattr(handlers, slot) is not None:
            raise ConfigurationError(
                f"Accelerator(kwargs_handlers=...) got more than one {type(handler).__name__}; "
                "pass each kind of handler once."
            )
        setattr(handlers, slot, handler)
    return handlers


def resolve_plugins(fsdp_plugin: Any = None, *, dynamo_backend: Any = None,
                    dynamo_plugin: Any = None, deepspeed_plugin: Any = None,
                    deepspeed_plugins: Any = None, gradient_state: Any = None,
                    parallelism_config: Any = None, torch_tp_plugin: Any = None
                    ) -> dict[str, Any]:
    """The parallelism plugins by kind: accel-parallel resolves the arguments (and the
    ``ACCELERATE_USE_*`` variables) as data (``accel_parallel.plugins``); the facade only
    takes back the accumulation count a DeepSpeed config may set."""
    steps = gradient_state.num_steps if gradient_state is not None else 1
    resolved = _resolve_plugins(fsdp_plugin=fsdp_plugin, deepspeed_plugin=deepspeed_plugin,
                                deepspeed_plugins=deepspeed_plugins,
                                parallelism_config=parallelism_config,
                                torch_tp_plugin=torch_tp_plugin, dynamo_backend=dynamo_backend,
                                dynamo_plugin=dynamo_plugin, accumulation_steps=steps)
    if gradient_state is not None and resolved.accumulation_steps != steps:
        gradient_state.plugin_kwargs["num_steps"] = resolved.accumulation_steps
    return resolved.plugins


def resolve_strategy(state: PartialState, precision: Precision, handlers: Handlers,
                     plugins: dict[str, Any] | None = None, strategy: Any = None) -> Strategy:
    """The strategy for this configuration, chosen by accel-parallel's registry (each
    strategy says which configuration it claims; ``ACCEL_STRATEGY`` names one, and so does
    ``Accelerator(strategy=...)``: a registered name or a ready ``Strategy``). The precision
    is handed over: the strategy decides how it applies."""
    plugins = dict(plugins or {})
    requested = None
    if isinstance(strategy, Strategy):
        if plugins.get("strategy") is not None:
            raise ConfigurationError(
                f"Accelerator(strategy={type(strategy).__name__}(...)) and a ready strategy "
                "given as a plugin argument: pass the strategy once, as strategy=.")
        plugins["strategy"] = strategy
    elif isinstance(strategy, str):
        requested = strategy
    elif strategy is not None:
        raise ConfigurationError(
            f"Accelerator(strategy={strategy!r}) takes a registered strategy name (or a "
            "preset's; `accel strategies` lists them) or a Strategy instance, not a "
            f"{type(strategy).__name__}.")
    if handlers.init_process_group is not None and not state.use_distributed:
        # Accelerate ignores it without a word; a one-process run starts no group from it
        warnings.warn(
            f"kwargs_handlers=[{type(handlers.init_process_group).__name__}(...)] is not used: "
            "this run has one process, and no process group is started from it (it applies "
            "when several processes run).", UserWarning, stacklevel=3)
    config = StrategyConfig(state=state, precision=precision, handlers=handlers.by_kind(),
                            plugins=plugins, requested=requested,
                            requested_by="Accelerator(strategy=...)")
    return select_strategy(config)


def resolve_precision(mixed_precision: Any, state: PartialState, handlers: Handlers) -> Precision:
    """The Precision for ``Accelerator(mixed_precision=...)``, ``ACCEL_MIXED_PRECISION`` (set by
    ``accel launch --mixed_precision``) and the precision handlers.

    The rule lives in ``accel_precision.resolve``: sources that name a precision must agree
    (a conflict says which source said what); none means fp32.
    """
    return build_precision(mixed_precision, state.device, autocast=handlers.autocast,
                           scaler=handlers.grad_scaler, ao_recipe=handlers.ao_recipe,
                           te_recipe=handlers.te_recipe)


def resolve_accumulation(steps: int, plugin: GradientAccumulationPlugin | None
                         ) -> GradientAccumulationPlugin:
    """One accumulation setting from ``gradient_accumulation_steps`` and/or a plugin."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigurationError(
            f"Accelerator(gradient_accumulation_steps={steps!r}) must be a positive integer."
        )
    if plugin is None:
        return GradientAccumulationPlugin(num_steps=steps)
    if steps != 1:
        raise ConfigurationError(
            f"Accelerator got both gradient_accumulation_steps={steps} and "
            f"gradient_accumulation_plugin={plugin!r}; set num_steps on the plugin only."
        )
    if plugin.num_steps is None:
        raise ConfigurationError(
            "GradientAccumulationPlugin(num_steps=None) given to Accelerator: set num_steps."
        )
    return plugin

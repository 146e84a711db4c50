"""Turn the Accelerator's arguments into the objects it delegates to — in one place.

DESIGN.md §4: arguments are resolved once, here, into a Strategy (and, once
accel-precision is wired, a Precision). The Accelerator itself never branches on a
concrete backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from accel_parallel import STRATEGIES, DistributedDataParallelKwargs, Strategy
from accel_state import (
    ConfigurationError,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    KwargsHandler,
    PartialState,
    env,
)

__all__ = ["Handlers", "collect_handlers", "check_precision_request", "resolve_accumulation",
           "resolve_strategy"]


@dataclass
class Handlers:
    """The kwargs handlers a user passed, at most one of each kind."""

    init_process_group: InitProcessGroupKwargs | None = None
    ddp: DistributedDataParallelKwargs | None = None


_HANDLER_SLOTS = {InitProcessGroupKwargs: "init_process_group", DistributedDataParallelKwargs: "ddp"}


def collect_handlers(kwargs_handlers: Iterable[Any] | None) -> Handlers:
    """Sort handlers into their slots; a duplicate or an unknown object is an error."""
    handlers = Handlers()
    for handler in kwargs_handlers or ():
        slot = next((name for cls, name in _HANDLER_SLOTS.items() if isinstance(handler, cls)), None)
        if slot is None:
            known = ", ".join(cls.__name__ for cls in _HANDLER_SLOTS)
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


def resolve_strategy(state: PartialState, handlers: Handlers) -> Strategy:
    """Data parallelism when several processes run, else a single device."""
    if state.use_distributed:
        return STRATEGIES.get("ddp")(state, ddp_kwargs=handlers.ddp)
    return STRATEGIES.get("single")(state)


def check_precision_request() -> None:
    """Refuse a mixed-precision request we cannot honour instead of silently training in fp32.

    ``accel launch --mixed_precision`` (or ``ACCEL_MIXED_PRECISION`` /
    ``ACCELERATE_MIXED_PRECISION``) may ask for fp16/bf16/fp8; this release trains in
    full precision only.
    """
    found = env.MIXED_PRECISION.raw()
    if found is None or found[1].strip().lower() in ("", "no", "fp32"):
        return
    name, value = found
    raise ConfigurationError(
        f"{name}={value!r} asks for mixed precision, which this release of accel does not "
        "provide yet (it trains in full precision). Launch without --mixed_precision (or set "
        f"{name}=no) to train in fp32."
    )


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

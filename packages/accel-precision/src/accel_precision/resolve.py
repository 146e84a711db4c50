"""One rule for choosing the precision, from the code and from the environment.

Sources: the ``mixed_precision`` argument (code) and ``ACCEL_MIXED_PRECISION`` /
``ACCELERATE_MIXED_PRECISION`` (set by ``accel launch --mixed_precision`` or the launch
config). As in Accelerate the argument wins over the environment, never silently: a
one-line warning names both values. The two variable spellings must agree with each
other (a ConfigurationError says which said what). With none, training is fp32
(``"no"``). ``"fp32"`` is accepted as a spelling of ``"no"``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError, env
from accel_state.imports import is_transformer_engine_available

from accel_precision.ao import TorchAOFP8Precision
from accel_precision.base import PRECISIONS, Precision
from accel_precision.te import TEFP8Precision

if TYPE_CHECKING:
    from accel_precision.kwargs import (
        AORecipeKwargs,
        AutocastKwargs,
        GradScalerKwargs,
        TERecipeKwargs,
    )

__all__ = ["resolve_mixed_precision", "build_precision", "fp8_precision"]

_ALIASES = {"fp32": "no", "none": "no", "false": "no"}
_FP8_BACKENDS = {"te": "te", "transformer_engine": "te", "ao": "ao", "torchao": "ao"}


def _normalise(value: Any) -> str:
    text = str(getattr(value, "value", value)).strip().lower()
    return _ALIASES.get(text, text)


def _sources(mixed_precision: Any) -> list[tuple[str, str]]:
    """``(who said it, normalised value)`` for every source that names a precision."""
    found: list[tuple[str, str]] = []
    if mixed_precision is not None:
        value = mixed_precision.name if isinstance(mixed_precision, Precision) else mixed_precision
        label = str(getattr(value, "value", value))
        found.append((f"Accelerator(mixed_precision={label!r})", _normalise(value)))
    for spelling in env.MIXED_PRECISION.names:
        raw = env.EnvVar(spelling, "").raw()
        if raw is not None and raw[1].strip():
            found.append((f"environment {spelling}={raw[1]}", _normalise(raw[1])))
    return found


def resolve_mixed_precision(mixed_precision: Any = None) -> tuple[str, str]:
    """``(name, source)`` of the requested precision.

    ``mixed_precision`` is the argument given in code (a name, a ``PrecisionType``, a
    :class:`Precision` object, or None for "not said"). It wins over the launcher's
    variable, as in Accelerate, with a warning when they differ; the two variable
    spellings disagreeing with each other is an error (neither is the user's code).
    """
    found = _sources(mixed_precision)
    if not found:
        return "no", "default (no mixed_precision argument, no ACCEL_MIXED_PRECISION)"
    from_env = found[1:] if mixed_precision is not None else found
    if len({value for _, value in from_env}) > 1:
        said = "; ".join(f"{who} asks for {value!r}" for who, value in from_env)
        raise ConfigurationError(
            f"Conflicting mixed precision requests: {said}. Set one variable, or give both "
            "the same value.")
    if mixed_precision is not None:
        overridden = [(who, value) for who, value in from_env if value != found[0][1]]
        if overridden:
            warnings.warn(
                f"{found[0][0]} overrides {overridden[0][0]} (the launcher's precision): "
                f"running in {found[0][1]!r}; drop the argument to follow the launcher.",
                UserWarning, stacklevel=4)
    return found[0][1], found[0][0]


def _warn_unused(name: str, handlers: dict[str, Any]) -> None:
    users = {"scaler": ("fp16",), "ao_recipe": ("fp8",), "te_recipe": ("fp8",)}
    if name == "no":  # full precision runs no autocast (other precisions may)
        users["autocast"] = ("a mixed precision",)
    for slot, names in users.items():
        handler = handlers.get(slot)
        if handler is not None and name not in names:
            warnings.warn(f"{type(handler).__name__} is ignored: mixed_precision={name!r} does not "
                          f"use it (it applies to {' / '.join(names)}).", UserWarning, stacklevel=4)


def build_precision(mixed_precision: Any = None, device: torch.device | str | None = None, *,
                    autocast: AutocastKwargs | None = None, scaler: GradScalerKwargs | None = None,
                    ao_recipe: AORecipeKwargs | None = None,
                    te_recipe: TERecipeKwargs | None = None) -> Precision:
    """The :class:`Precision` for the request (see the module docstring for the rule).

    An unknown name lists the registered ones (entry-point group ``accel.precisions``).
    """
    name, source = resolve_mixed_precision(mixed_precision)
    if isinstance(mixed_precision, Precision):
        return mixed_precision
    try:
        factory = PRECISIONS.get(name)
    except ConfigurationError as error:
        raise ConfigurationError(f"{source}: {error}") from None
    handlers = {"autocast": autocast, "scaler": scaler, "ao_recipe": ao_recipe,
                "te_recipe": te_recipe}
    _warn_unused(name, handlers)
    make = getattr(factory, "from_handlers", factory)
    return make(torch.device(device if device is not None else "cpu"), **handlers)


def fp8_precision(device: torch.device, *, autocast: AutocastKwargs | None = None,
                  scaler: GradScalerKwargs | None = None, ao_recipe: AORecipeKwargs | None = None,
                  te_recipe: TERecipeKwargs | None = None) -> Precision:
    """``"fp8"``: the backend named by a recipe handler, else ``ACCEL_FP8_BACKEND``, else
    Transformer Engine on a CUDA machine that has it, else torchao."""
    if ao_recipe is not None and te_recipe is not None:
        raise ConfigurationError(
            f"kwargs_handlers has both {type(ao_recipe).__name__} (torchao) and "
            f"{type(te_recipe).__name__} (Transformer Engine); fp8 runs through one backend: "
            "pass only one of them.")
    backend = "te" if te_recipe is not None else "ao" if ao_recipe is not None else None
    found = env.FP8_BACKEND.raw()
    if found is not None and found[1].strip():
        chosen = _FP8_BACKENDS.get(found[1].strip().lower())
        if chosen is None:
            raise ConfigurationError(f"{found[0]}={found[1]!r} is not an fp8 backend; use 'te' "
                                     "(Transformer Engine) or 'ao' (torchao).")
        if backend is not None and chosen != backend:
            raise ConfigurationError(
                f"{found[0]}={found[1]!r} conflicts with the {backend.upper()} recipe handler "
                "passed in kwargs_handlers; make them agree or drop one.")
        backend = chosen
    if backend is None:
        use_te = torch.device(device).type == "cuda" and is_transformer_engine_available()
        backend = "te" if use_te else "ao"
    if backend == "te":
        return TEFP8Precision(device=device, autocast_kwargs=autocast, recipe=te_recipe)
    return TorchAOFP8Precision(device=device, autocast_kwargs=autocast, recipe=ao_recipe)

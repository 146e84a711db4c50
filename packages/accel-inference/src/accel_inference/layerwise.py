"""Layerwise casting: keep weights in a small storage dtype, compute in a wider one.

:func:`attach_layerwise_casting_hooks` walks a model and puts a
:class:`~accel_inference.hooks.LayerwiseCastingHook` on each Linear / convolution layer,
so those weights sit in ``storage_dtype`` (e.g. ``torch.float8_e4m3fn``) and are up-cast
to ``compute_dtype`` only while their layer runs. Normalisation layers and anything the
caller names stay untouched (they are sensitive to precision and small).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
from accel_state import ConfigurationError
from torch import nn

from accel_inference.hooks import LayerwiseCastingHook, add_hook_to_module

__all__ = ["CASTABLE_LAYERS", "attach_layerwise_casting_hooks"]

#: layers whose weights get the hook; everything else is searched for such layers
CASTABLE_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
    nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
)


def _check(storage_dtype: object, compute_dtype: object) -> None:
    for name, value in (("storage_dtype", storage_dtype), ("compute_dtype", compute_dtype)):
        if not isinstance(value, torch.dtype):
            raise ConfigurationError(f"attach_layerwise_casting_hooks({name}={value!r}) must be "
                                     "a torch.dtype, e.g. torch.float8_e4m3fn or torch.bfloat16.")


def attach_layerwise_casting_hooks(module: nn.Module, storage_dtype: torch.dtype,
                                   compute_dtype: torch.dtype,
                                   skip_modules_pattern: str | Iterable[str] | None = None,
                                   skip_modules_classes: Iterable[type[nn.Module]] | None = None,
                                   non_blocking: bool = False) -> None:
    """Attach casting hooks to every castable layer of ``module`` (``module`` itself
    included), skipping each submodule whose qualified name matches one of the regular
    expressions ``skip_modules_pattern`` or whose class is in ``skip_modules_classes``
    (with everything below it)."""
    _check(storage_dtype, compute_dtype)
    patterns = ([skip_modules_pattern] if isinstance(skip_modules_pattern, str)
                else list(skip_modules_pattern or ()))
    try:
        compiled = [re.compile(p) for p in patterns]
    except re.error as exc:
        raise ConfigurationError(f"attach_layerwise_casting_hooks(skip_modules_pattern="
                                 f"{skip_modules_pattern!r}) is not a valid regular "
                                 f"expression: {exc}.") from None
    classes = tuple(skip_modules_classes or ())
    _attach(module, "", storage_dtype, compute_dtype, compiled, classes, non_blocking)


def _attach(module: nn.Module, name: str, storage: torch.dtype, compute: torch.dtype,
            patterns: list[re.Pattern[str]], classes: tuple[type[nn.Module], ...],
            non_blocking: bool) -> None:
    if (classes and isinstance(module, classes)) or any(p.search(name) for p in patterns):
        return
    if isinstance(module, CASTABLE_LAYERS):
        add_hook_to_module(module, LayerwiseCastingHook(storage, compute, non_blocking),
                           append=True)
        return
    for child_name, child in module.named_children():
        qualified = f"{name}.{child_name}" if name else child_name
        _attach(child, qualified, storage, compute, patterns, classes, non_blocking)

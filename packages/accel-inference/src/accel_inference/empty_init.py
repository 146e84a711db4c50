"""Build models without allocating their weights: on ``meta`` or straight on a device.

``init_empty_weights`` is how a 70B model is instantiated in milliseconds before its
checkpoint is streamed in (``load_checkpoint_and_dispatch``): parameters are created on the
``meta`` device, which records shape and dtype and owns no storage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["init_empty_weights", "init_on_device"]


def _include_buffers(include_buffers: bool | None) -> bool:
    if include_buffers is not None:
        return include_buffers
    from accel_state import env

    return env.INIT_INCLUDE_BUFFERS.get_bool(False)


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Create every parameter built inside the block on the ``meta`` device (no storage).

    Buffers stay on the CPU unless ``include_buffers`` (or ``ACCEL_INIT_INCLUDE_BUFFERS=1``):
    models often compute them in ``__init__`` (rotary tables, position ids) and they are small.
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


@contextlib.contextmanager
def init_on_device(device: torch.device | str | int,
                   include_buffers: bool | None = None) -> Iterator[None]:
    """Create every parameter (and with ``include_buffers`` every buffer) on ``device``.

    With buffers included, the whole block runs under ``with torch.device(device)``, so every
    tensor factory allocates there. Otherwise only ``register_parameter`` is redirected: the
    parameter keeps its class and attributes (``requires_grad``, custom subclasses' fields).
    """
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if _include_buffers(include_buffers):
        patched = _skip_meta_initialisers() if device.type == "meta" else {}
        try:
            with device:
                yield
        finally:
            for name, function in patched.items():
                setattr(nn.init, name, function)
        return
    original = nn.Module.register_parameter

    def register_on_device(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is None or param.device == device:
            return
        current = module._parameters[name]
        fields: dict[str, Any] = dict(vars(current))
        fields.pop("requires_grad", None)
        # empty_like on meta is a native op; .to("meta") would import torch's Python meta
        # registrations (sympy), which costs seconds the first time
        data = torch.empty_like(current, device=device) if device.type == "meta" else \
            current.to(device)
        moved = type(current)(data, **fields)
        moved.requires_grad_(current.requires_grad)
        module._parameters[name] = moved

    nn.Module.register_parameter = register_on_device  # type: ignore[method-assign]
    patched = _skip_meta_initialisers() if device.type == "meta" else {}
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]
        for name, function in patched.items():
            setattr(nn.init, name, function)


_INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
                 "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                 "kaiming_normal_", "orthogonal_", "sparse_")


def _skip_meta_initialisers() -> dict[str, Any]:
    """Make ``torch.nn.init``'s initialisers no-ops on meta tensors (there is nothing to
    fill). Running them on meta goes through torch's Python reference kernels, whose first
    use imports torch._dynamo: seconds, for nothing. Returns the originals to restore."""
    originals = {name: getattr(nn.init, name) for name in _INITIALISERS
                 if hasattr(nn.init, name)}

    def skipping(function: Any) -> Any:
        def initialise(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            return tensor if tensor.is_meta else function(tensor, *args, **kwargs)

        return initialise

    for name, function in originals.items():
        setattr(nn.init, name, skipping(function))
    return originals

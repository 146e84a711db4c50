"""The Precision interface: every hook a no-op, subclasses override only what they need.

The Accelerator calls these hooks at fixed points (prepare a model, run forward,
backward, step an optimizer, save/load) and never asks which precision it holds
(DESIGN.md §4). Strategies read :attr:`Precision.param_dtype` / :attr:`Precision.reduce_dtype`
from the object; the precision never looks at the strategy.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accel_state import Registry, convert_to_fp32

from accel_precision.kwargs import AutocastKwargs

if TYPE_CHECKING:
    from accel_precision.kwargs import AORecipeKwargs, GradScalerKwargs, TERecipeKwargs

__all__ = ["Precision", "NoPrecision", "AutocastForward", "PRECISIONS"]

_HALF = (torch.float16, torch.bfloat16)


def _outputs_to_fp32(output: Any) -> Any:
    """fp32 copies of fp16/bf16 outputs; a plain tensor takes the fast path."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in _HALF else output
    return convert_to_fp32(output)


def _is_compiled(module: torch.nn.Module) -> bool:
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


class AutocastForward:
    """A model's forward run under ``torch.autocast`` that returns fp32 outputs.

    A class rather than a closure so a prepared model still pickles and deep-copies;
    the original forward stays reachable as ``model._original_forward`` (and ``__wrapped__``).
    """

    def __init__(self, forward: Callable[..., Any], device_type: str, dtype: torch.dtype,
                 autocast_kwargs: dict[str, Any]) -> None:
        self.forward = forward
        self.device_type = device_type
        self.dtype = dtype
        self.autocast_kwargs = autocast_kwargs
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype, **self.autocast_kwargs):
            output = self.forward(*args, **kwargs)
        return _outputs_to_fp32(output)


class Precision:
    """Base precision: full fp32 training. Every hook below is a no-op default.

    Args:
        device: the device training runs on (its type picks the autocast backend).
        autocast_kwargs: options for ``torch.autocast`` (subclasses that autocast use them).
    """

    #: The ``mixed_precision`` value this precision answers to.
    name = "no"

    def __init__(self, *, device: torch.device | str | None = None,
                 autocast_kwargs: AutocastKwargs | None = None) -> None:
        self.device = torch.device(device if device is not None else "cpu")
        self.autocast_kwargs = autocast_kwargs or AutocastKwargs()

    @classmethod
    def from_handlers(cls, device: torch.device, *, autocast: AutocastKwargs | None = None,
                      scaler: GradScalerKwargs | None = None,
                      ao_recipe: AORecipeKwargs | None = None,
                      te_recipe: TERecipeKwargs | None = None) -> Precision:
        """Build from the Accelerator's kwargs handlers (those it does not use are ignored)."""
        return cls(device=device, autocast_kwargs=autocast)

    # -- what strategies and the facade read -------------------------------------------------
    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """dtype of ``torch.autocast`` around forward; None: no autocast."""
        return None

    @property
    def native_amp(self) -> bool:
        """Whether forward runs under ``torch.autocast`` (Accelerate's ``native_amp``)."""
        return self.autocast_dtype is not None

    @property
    def param_dtype(self) -> torch.dtype | None:
        """dtype a sharding strategy casts parameters to for compute (e.g. FSDP2's
        ``MixedPrecisionPolicy.param_dtype``); master weights stay as built. None: no cast."""
        return None

    @property
    def reduce_dtype(self) -> torch.dtype | None:
        """dtype gradients are reduced in across processes. None: the gradients' own dtype."""
        return None

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The loss scaler (fp16 only)."""
        return None

    @property
    def fp8_backend(self) -> str | None:
        """``"AO"`` or ``"TE"`` for fp8 precisions, else None."""
        return None

    def overrides(self, hook: str) -> bool:
        """Whether this precision replaces the base ``hook`` (lets callers skip no-op hooks)."""
        return getattr(type(self), hook) is not getattr(Precision, hook)

    # -- models ------------------------------------------------------------------------------
    def adapt_to_sharding(self) -> None:
        """Called once, before any model is prepared, by a strategy that shards parameters
        and gradients over the processes (FSDP2): fp16 makes its loss scaler agree across
        the shards, torchao fp8 all-gathers weights in fp8. A no-op here."""

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Change the model itself (swap layers for fp8 ones, cast, ...). Runs once in prepare."""
        return module

    def forward_context(self, autocast_kwargs: AutocastKwargs | None = None
                        ) -> contextlib.AbstractContextManager[Any]:
        """Context forward runs in (``torch.autocast`` for mixed precision)."""
        return contextlib.nullcontext()

    def wrap_forward(self, module: torch.nn.Module) -> torch.nn.Module:
        """Run ``module.forward`` under :meth:`forward_context` with fp32 outputs.

        The original forward is kept as ``module._original_forward`` so
        ``unwrap_model(keep_fp32_wrapper=False)`` can restore it. A no-op without autocast.
        """
        dtype = self.autocast_dtype
        # a torch.compile'd model: wrap the module inside, where unwrapping looks for it
        target = module._orig_mod if _is_compiled(module) else module
        if dtype is None or hasattr(target, "_original_forward"):
            return module
        target._original_forward = target.forward
        target.forward = AutocastForward(target.forward, self.device.type, dtype,
                                         self._autocast_arguments(self.autocast_kwargs))
        return module

    def _autocast_arguments(self, handler: AutocastKwargs) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": handler.enabled}
        if handler.cache_enabled is not None:
            out["cache_enabled"] = handler.cache_enabled
        return out

    # -- backward and optimizer --------------------------------------------------------------
    def pre_backward(self, loss: torch.Tensor) -> torch.Tensor:
        """The tensor backward starts from (the scaled loss for fp16)."""
        return loss

    def backward(self, loss: torch.Tensor, backward_fn: Callable[..., None] | None = None,
                 **kwargs: Any) -> None:
        """Backward through ``backward_fn`` (the strategy's), starting from :meth:`pre_backward`."""
        tensor = self.pre_backward(loss)
        if backward_fn is None:
            tensor.backward(**kwargs)
        else:
            backward_fn(tensor, **kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring ``optimizer``'s gradients back to their true scale (before clipping/inspection)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer,
                       closure: Callable[[], Any] | None = None) -> bool:
        """Step ``optimizer``; return False when the step was skipped (inf/nan gradients)."""
        if closure is None:
            optimizer.step()
        else:
            optimizer.step(closure)
        return True

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """State to checkpoint (the loss scaler's); empty when there is none."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, device={self.device})"


class NoPrecision(Precision):
    """fp32 training: the base class as is, registered as ``"no"``."""

    name = "no"


#: Precisions by ``mixed_precision`` name (entry-point group ``accel.precisions``).
#: A value is a Precision subclass (built with ``from_handlers``) or a factory with the
#: same signature (``"fp8"`` picks its backend from the handlers).
PRECISIONS: Registry[Any] = Registry("accel.precisions", "precision")

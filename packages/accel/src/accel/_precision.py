"""The Accelerator's mixed-precision surface, delegated to its :class:`~accel_precision.Precision`.

A mixin so that ``accelerator.py`` only calls four hooks (build, prepare a model, attach
to an optimizer, backward) and the Accelerate-named properties and methods
(``mixed_precision``, ``native_amp``, ``scaler``, ``autocast()``, ``unscale_gradients``,
``clip_grad_norm_``, ...) live here. Nothing in it branches on a concrete precision:
only the hooks a precision overrides are called on the hot path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from accel_precision import AutocastKwargs, FP8BackendType, Precision

from accel.optimizer import AcceleratedOptimizer

if TYPE_CHECKING:
    from accel_state import GradientState, PartialState

__all__ = ["PrecisionMixin"]


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    while isinstance(optimizer, AcceleratedOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


class PrecisionMixin:
    """Accelerate's precision API on the Accelerator (state: ``self._precision``)."""

    _precision: Precision
    _optimizers: list[AcceleratedOptimizer]
    state: PartialState
    gradient_state: GradientState

    # -- hooks accelerator.py calls ----------------------------------------------------------
    def _precision_prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Convert layers (fp8) and wrap forward in autocast, before the strategy wraps it."""
        return self._precision.wrap_forward(self._precision.convert_module(model))

    def _precision_prepare_optimizer(self, optimizer: AcceleratedOptimizer) -> None:
        """Route the optimizer's steps through the precision when it changes stepping."""
        optimizer.scaler = self._precision.scaler
        if self._precision.overrides("optimizer_step"):
            optimizer._precision = self._precision

    # -- properties --------------------------------------------------------------------------
    @property
    def precision(self) -> Precision:
        """The Precision object (strategies read ``param_dtype`` / ``reduce_dtype`` from it)."""
        return self._precision

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"``, ``"bf16"``, ``"fp8"`` (or a registered third-party name)."""
        return self._precision.name

    @property
    def native_amp(self) -> bool:
        """Whether prepared models run forward under ``torch.autocast``."""
        return self._precision.native_amp

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The fp16 loss scaler (``torch.amp.GradScaler``), else None."""
        return self._precision.scaler

    @property
    def fp8_backend(self) -> FP8BackendType:
        """``AO`` (torchao) or ``TE`` (Transformer Engine) with ``fp8``, else ``NO``."""
        return FP8BackendType(self._precision.fp8_backend or "NO")

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether the last optimizer step was skipped (inf/nan gradients under fp16)."""
        return any(optimizer.step_was_skipped for optimizer in self._optimizers)

    # -- methods -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Iterator[None]:
        """Run the block under the precision's autocast (a no-op in fp32).

        ``autocast_handler`` overrides the Accelerator's ``AutocastKwargs`` for this block.
        """
        with self._precision.forward_context(autocast_handler):
            yield

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide the gradients of ``optimizer`` (default: every prepared one) by the loss scale.

        Only meaningful with fp16 loss scaling, and only on a step that syncs gradients
        (unscaling half an accumulation would mix scaled and unscaled gradients).
        Calling it twice before the step is harmless.
        """
        if not self._precision.overrides("unscale_") or not self.gradient_state.sync_gradients:
            return
        if optimizer is None:
            optimizers: Iterable[Any] = self._optimizers
        elif isinstance(optimizer, (list, tuple)):
            optimizers = optimizer
        else:
            optimizers = [optimizer]
        for each in optimizers:
            self._precision.unscale_(_inner(each))

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` on true-scale gradients (unscales first)."""
        self.unscale_gradients()
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """``torch.nn.utils.clip_grad_value_`` on true-scale gradients (unscales first)."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

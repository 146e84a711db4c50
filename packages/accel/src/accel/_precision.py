"""The Accelerator's mixed-precision surface, delegated to its :class:`~accel_precision.Precision`.

The precision is resolved first and handed to the strategy, which applies it to models
and owns the loss scaler and the steps (``accel_parallel.Strategy``). This mixin holds the
Accelerate-named properties and methods (``mixed_precision``, ``native_amp``, ``scaler``,
``autocast()``, ``unscale_gradients``, ``clip_grad_norm_``, ...) and delegates them to the
strategy or the precision; nothing in it branches on a concrete precision or strategy.
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
    _strategy: Any
    _optimizers: list[AcceleratedOptimizer]
    state: PartialState
    gradient_state: GradientState

    # -- properties --------------------------------------------------------------------------
    @property
    def precision(self) -> Precision:
        """The Precision object (strategies read ``param_dtype`` / ``reduce_dtype`` from it)."""
        return self._precision

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"``, ``"bf16"``, ``"fp8"`` (or a registered third-party name): what
        prepared models compute in, as the strategy applies it (under DeepSpeed, its config's
        ``bf16`` / ``fp16``)."""
        return self._strategy.mixed_precision

    @property
    def native_amp(self) -> bool:
        """Whether prepared models run forward under ``torch.autocast`` (never under
        DeepSpeed, whose engine holds the model in its 16-bit dtype)."""
        return self._strategy.native_amp

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The fp16 loss scaler (``torch.amp.GradScaler``) the strategy uses, else None."""
        return self._strategy.scaler

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
        with self._strategy.forward_context(autocast_handler):
            yield

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide the gradients of ``optimizer`` (default: every prepared one) by the loss scale.

        Only meaningful with fp16 loss scaling, and only on a step that syncs gradients
        (unscaling half an accumulation would mix scaled and unscaled gradients).
        Calling it twice before the step is harmless.
        """
        if not self.gradient_state.sync_gradients:
            return
        if optimizer is None:
            optimizers: Iterable[Any] = self._optimizers
        elif isinstance(optimizer, (list, tuple)):
            optimizers = optimizer
        else:
            optimizers = [optimizer]
        for each in optimizers:
            self._strategy.unscale_gradients(_inner(each))

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """Clip the total gradient norm on true-scale gradients (unscales first); the
        strategy computes it (``torch.nn.utils.clip_grad_norm_`` for replicated models)."""
        self.unscale_gradients()
        return self._strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """``torch.nn.utils.clip_grad_value_`` on true-scale gradients (unscales first)."""
        self.unscale_gradients()
        self._strategy.clip_grad_value_(parameters, clip_value)

"""``Accelerator.lomo_backward``: LOMO / AdaLomo's fused backward-and-update.

LOMO (``lomo-optim``) updates each parameter inside the backward pass instead of keeping
its gradient, so its optimizers need the loss and the learning rate, not ``step()``. The
package is optional: nothing here imports it unless ``lomo_backward`` runs.
"""

from __future__ import annotations

from typing import Any

import torch
from accel_state import ConfigurationError
from accel_state.imports import require

__all__ = ["LomoMixin"]

_LOMO_CLASSES = ("Lomo", "AdaLomo")


def _inner(optimizer: Any) -> Any:
    return getattr(optimizer, "optimizer", optimizer)  # AcceleratedOptimizer -> torch's


def _is_lomo(optimizer: Any) -> bool:
    """Whether ``optimizer`` is lomo-optim's (checked by class, without importing it)."""
    return any(cls.__module__.split(".")[0] == "lomo_optim" and cls.__name__ in _LOMO_CLASSES
               for cls in type(_inner(optimizer)).__mro__)


class LomoMixin:
    """LOMO support of ``Accelerator`` (expects ``_optimizers``)."""

    _optimizers: list[Any]

    @property
    def has_lomo_optimizer(self) -> bool:
        """Whether a prepared optimizer is lomo-optim's ``Lomo`` or ``AdaLomo``."""
        return any(_is_lomo(optimizer) for optimizer in self._optimizers)

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        """Run the fused backward-and-update of every prepared LOMO / AdaLomo optimizer
        (they update parameters during backward; there is no ``optimizer.step()``).
        ``accelerator.backward(loss, learning_rate=lr)`` calls it when one was prepared."""
        lomo = require("lomo_optim", package="lomo-optim", feature="Accelerator.lomo_backward")
        if learning_rate is None:
            raise ConfigurationError(
                "Accelerator.lomo_backward(loss, learning_rate=None): LOMO optimizers update "
                "parameters during backward and need the learning rate of this step.")
        optimizers = [_inner(o) for o in self._optimizers
                      if isinstance(_inner(o), (lomo.Lomo, lomo.AdaLomo))]
        if not optimizers:
            names = ", ".join(type(_inner(o)).__name__ for o in self._optimizers) or "none"
            raise ConfigurationError(
                f"Accelerator.lomo_backward() found no LOMO optimizer among the prepared ones "
                f"({names}): pass a lomo_optim.Lomo or lomo_optim.AdaLomo to "
                "accelerator.prepare(), or call accelerator.backward(loss) for other optimizers.")
        for optimizer in optimizers:
            optimizer.fused_backward(loss, learning_rate)

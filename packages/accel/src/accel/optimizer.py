"""``AcceleratedOptimizer``: the user's optimizer, stepping only on gradient-sync steps.

Whether to step and how (loss scaling, an engine's own step) is the strategy's: the
optimizer asks :meth:`accel_parallel.Strategy.should_step` about the Accelerator's
:class:`~accel_state.MicroStep`, calls ``optimizer_step`` / ``zero_grad``, and never asks
which strategy it is.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from accel_precision import step_with_scaler
from accel_state import GradientState, send_to_device

from accel._module_compat import forward_to

__all__ = ["AcceleratedOptimizer", "move_to_device", "patch_optimizer_step"]


def move_to_device(state: Any, device: torch.device) -> Any:
    """Move every tensor of an optimizer state dict to ``device``."""
    return send_to_device(state, device)


def patch_optimizer_step(accelerated_optimizer: Any, method: Any) -> Any:
    """``method`` (an optimizer's ``step``) wrapped to set
    ``accelerated_optimizer._accelerate_step_called`` when it runs, as Accelerate's helper
    does: code that hands a step to a GradScaler can tell afterwards whether it ran."""

    @functools.wraps(method)
    def patched_step(*args: Any, **kwargs: Any) -> Any:
        accelerated_optimizer._accelerate_step_called = True
        return method(*args, **kwargs)

    return patched_step


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer so that ``step``/``zero_grad`` are skipped during gradient accumulation.

    It is an ``Optimizer`` (isinstance checks and LR schedulers keep working) but keeps no
    state of its own: ``param_groups``, ``state`` and ``defaults`` are the wrapped ones.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device_placement: bool = True,
                 scaler: Any = None, *, strategy: Any = None, micro_step: Any = None) -> None:
        self.optimizer = optimizer
        self.scaler = scaler
        #: Accelerate's view of the accumulation state (kept for code that reads it)
        self.gradient_state = GradientState()
        # the batch's place in accumulation, given by the Accelerator (by hand: the process's)
        self._micro_step = micro_step if micro_step is not None \
            else self.gradient_state.micro_step
        self.device_placement = device_placement
        self._is_overflow = False
        self._accelerate_step_called = False
        # The Accelerator's strategy: it takes the steps (precision, engines). Without one
        # (an optimizer wrapped by hand) a ``scaler`` given here is used as in Accelerate.
        self._strategy: Any = strategy
        # Set by the Accelerator while checkpoint I/O must finish before the next step (an
        # async save still copying this optimizer's tensors, a load still being verified).
        self._before_step: Any = None

    # Delegated views of the wrapped optimizer -------------------------------------------------
    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load, moving tensors to the parameters' device first (a checkpoint may be on CPU)."""
        if self.device_placement and self.param_groups and self.param_groups[0]["params"]:
            state_dict = move_to_device(state_dict, self.param_groups[0]["params"][0].device)
        self.optimizer.load_state_dict(state_dict)

    # Stepping ---------------------------------------------------------------------------------
    def _should_step(self) -> bool:
        strategy = self._strategy
        micro = self._micro_step
        return micro.sync if strategy is None else strategy.should_step(micro)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not self._should_step():
            return
        if self._strategy is not None:
            self._strategy.zero_grad(self.optimizer, set_to_none)
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        """Step the wrapped optimizer, except on accumulation micro-steps."""
        if not self._should_step():
            return None
        self._accelerate_step_called = True
        if self._before_step is not None:
            self._before_step()
        if self._strategy is not None:  # loss-scaled steps skip on inf/nan gradients
            self._is_overflow = not self._strategy.optimizer_step(self.optimizer, closure)
            return None
        if self.scaler is not None:  # a GradScaler given directly, as in Accelerate
            self._is_overflow = not step_with_scaler(self.scaler, self.optimizer, closure)
            self.scaler.update()
            return None
        return self.optimizer.step(closure) if closure is not None else self.optimizer.step()

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step`` was skipped because of an fp16 overflow."""
        return self._is_overflow

    def train(self) -> None:
        """For schedule-free optimizers, which switch weights between train and eval."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.state")

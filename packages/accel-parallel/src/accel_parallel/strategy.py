"""The Strategy interface: how a model is wrapped, unwrapped, and how gradients are synced.

The facade hands every prepared model to one Strategy object and never asks which
backend it is (DESIGN.md §4). Backends differ only through these methods and small
capability protocols such as :class:`SupportsNoSync`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from accel_state import Registry

if TYPE_CHECKING:
    import torch
    from accel_state import PartialState

__all__ = ["Strategy", "SupportsNoSync", "STRATEGIES"]


class Strategy:
    """Base strategy: every hook is a sensible single-process default; subclasses override.

    ``state`` is the process's :class:`~accel_state.PartialState` (device, ranks).
    """

    name = "base"

    def __init__(self, state: PartialState, **options: Any) -> None:
        self.state = state
        self.options = options

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Move the model to the device (when asked) and wrap it for this strategy."""
        if device_placement:
            model = model.to(self.state.device)
        return model

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's own module inside whatever this strategy wrapped around it."""
        return model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip gradient synchronisation inside the block (a no-op without data parallelism)."""
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.state.device}, world={self.state.num_processes})"


@runtime_checkable
class SupportsNoSync(Protocol):
    """A wrapped model that can accumulate gradients locally (``DistributedDataParallel``)."""

    def no_sync(self) -> contextlib.AbstractContextManager[None]: ...


STRATEGIES: Registry[type[Strategy]] = Registry("accel.strategies", "strategy")


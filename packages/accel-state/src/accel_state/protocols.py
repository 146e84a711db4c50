"""Small structural protocols that sibling packages share without importing each other.

``Stateful`` is torch.distributed.checkpoint's notion of a checkpointable object: anything
with ``state_dict()`` and ``load_state_dict(state)``. accel-data's loaders implement it and
accel-checkpoint saves whatever implements it, so neither imports the other.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Stateful"]


@runtime_checkable
class Stateful(Protocol):
    """An object whose state can be saved and restored (modules, optimizers, loaders, ...)."""

    def state_dict(self) -> dict[str, Any]:
        """The object's state: tensors and plain data (dict, list, str, int, float, ...)."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any:
        """Restore the state returned by :meth:`state_dict`."""
        ...

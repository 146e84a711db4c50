"""Prepared loaders built on torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader``).

The class is made on first use, so ``import accel_data`` never imports torchdata. Its
``state_dict()`` adds torchdata's own state (sampler iterator, workers, a ``Stateful``
dataset) under ``"dataloader"``, taken when the last *yielded* batch was fetched: the
one-batch look-ahead would otherwise save a position one batch too far.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from accel_state.imports import require

__all__ = ["stateful_class"]

_CLASSES: dict[type, type] = {}


def stateful_class(base: type) -> type:
    """``base`` (a ``DataLoaderShard`` class) mixed with torchdata's ``StatefulDataLoader``."""
    if base in _CLASSES:
        return _CLASSES[base]
    require("torchdata", extra="torchdata", dist="accel-data",
            feature="use_stateful_dataloader=True")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def _open(self: Any, skip: int) -> tuple[Iterator[Any], int]:
        iterator, to_read = base._open(self, skip)
        self._states = deque(maxlen=2)
        return _tracking(self, iterator), to_read

    def _tracking(self: Any, iterator: Iterator[Any]) -> Iterator[Any]:
        for batch in iterator:
            self._states.append(StatefulDataLoader.state_dict(self))
            yield batch

    def state_dict(self: Any) -> dict[str, Any]:
        state = base.state_dict(self)
        states = getattr(self, "_states", None)
        if state["batches_yielded"] and states and self._yielded == state["batches_yielded"]:
            state["dataloader"] = states[-1] if self.end_of_dataloader or len(states) == 1 \
                else states[-2]
        return state

    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        base.load_state_dict(self, state_dict)
        inner = state_dict.get("dataloader")
        if inner is not None:
            StatefulDataLoader.load_state_dict(self, inner)
            self._skip_plan = None  # torchdata's own state resumes the position

    cls = type(f"Stateful{base.__name__}", (base, StatefulDataLoader), {
        "__doc__": f"{base.__name__} on torchdata's StatefulDataLoader.",
        "__module__": __name__, "_open": _open, "state_dict": state_dict,
        "load_state_dict": load_state_dict, "use_stateful_dataloader": True})
    _CLASSES[base] = cls
    return cls

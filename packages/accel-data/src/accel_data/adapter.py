"""``DataLoaderAdapter``: one wrapper over a plain ``DataLoader`` or torchdata's
``StatefulDataLoader``, chosen by a flag, that behaves as the loader it holds.

Code written for Accelerate subclasses or builds it to get resumable loading without
caring which class does the work; everything not defined here is the inner loader's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accel_state import ConfigurationError
from accel_state.imports import require
from torch.utils.data import DataLoader

__all__ = ["DataLoaderAdapter"]


class DataLoaderAdapter:
    """Builds ``DataLoader(dataset, batch_sampler=..., **kwargs)`` — or a
    ``StatefulDataLoader`` with ``use_stateful_dataloader=True`` (needs torchdata) — and
    passes iteration, ``len`` and every attribute through to it. ``isinstance`` checks
    see the inner loader's class."""

    def __init__(self, dataset: Any, use_stateful_dataloader: bool = False,
                 batch_sampler: Any = None, **kwargs: Any) -> None:
        self.use_stateful_dataloader = bool(use_stateful_dataloader)
        loader_class: type = DataLoader
        if self.use_stateful_dataloader:
            require("torchdata", extra="torchdata", dist="accel-data",
                    feature="DataLoaderAdapter(use_stateful_dataloader=True)")
            from torchdata.stateful_dataloader import StatefulDataLoader

            loader_class = StatefulDataLoader
        if batch_sampler is not None:
            kwargs["batch_sampler"] = batch_sampler
        self.base_dataloader = loader_class(dataset, **kwargs)

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return self.base_dataloader.__class__

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":  # not set yet (construction failed or unpickling)
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base_dataloader)

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def state_dict(self) -> dict[str, Any]:
        """The inner ``StatefulDataLoader``'s position (resume with :meth:`load_state_dict`)."""
        self._need_state("state_dict")
        return self.base_dataloader.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the inner ``StatefulDataLoader`` where ``state_dict`` was taken."""
        self._need_state("load_state_dict")
        self.base_dataloader.load_state_dict(state_dict)

    def _need_state(self, method: str) -> None:
        if not self.use_stateful_dataloader:
            raise ConfigurationError(
                f"DataLoaderAdapter.{method}() needs use_stateful_dataloader=True: a plain "
                "DataLoader keeps no position to save or restore.")

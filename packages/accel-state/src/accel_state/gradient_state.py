"""Gradient-synchronisation state (:class:`GradientState`), shared by the accelerator, the
prepared optimizers, schedulers and dataloaders: whether this batch ends an accumulation
cycle, and which dataloader is being iterated."""

from __future__ import annotations

from typing import Any

from accel_state.shared import SharedDict

__all__ = ["GradientState"]


class GradientState:
    """Gradient-synchronisation state shared by the accelerator, optimizers and dataloaders.

    ``sync_gradients`` is False on micro-steps of gradient accumulation; dataloaders
    report ``end_of_dataloader`` and ``remainder`` here so accumulation and
    ``gather_for_metrics`` can react to the last batch.
    """

    _shared_state: dict[str, Any] = SharedDict()

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        self.__dict__ = self._shared_state
        if not self.initialized:
            self.sync_gradients = True
            self.active_dataloader: Any = None
            self.dataloader_references: list[Any] = [None]
            self.plugin_kwargs: dict[str, Any] = {}
            self.is_xla_gradients_synced = False
        if gradient_accumulation_plugin is not None:
            # every field, defaults included: a default such as adjust_scheduler=True matters
            to_dict = getattr(gradient_accumulation_plugin, "to_dict", None)
            self.plugin_kwargs = dict(to_dict() if to_dict else vars(gradient_accumulation_plugin))

    @property
    def initialized(self) -> bool:
        return bool(self._shared_state)

    @property
    def num_steps(self) -> int:
        return int(self.plugin_kwargs.get("num_steps") or 1)

    @property
    def adjust_scheduler(self) -> bool:
        return bool(self.plugin_kwargs.get("adjust_scheduler", False))

    @property
    def sync_with_dataloader(self) -> bool:
        return bool(self.plugin_kwargs.get("sync_with_dataloader", True))

    @property
    def sync_each_batch(self) -> bool:
        return bool(self.plugin_kwargs.get("sync_each_batch", False))

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        return bool(getattr(self.active_dataloader, "end_of_dataloader", False))

    @property
    def remainder(self) -> int:
        return int(getattr(self.active_dataloader, "remainder", -1)) if self.in_dataloader else -1

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        self.sync_gradients = sync_gradients

    def _advance(self, step: int) -> int:
        """``accumulate()``'s rule for one batch, in one call since it runs on every
        micro-step: the batch ends a cycle (``sync_gradients``) every ``num_steps`` batches,
        and on the last batch of the active dataloader when ``sync_with_dataloader``.
        Returns the batch count after this one (0 once a dataloader's end reset it)."""
        options = self.plugin_kwargs  # read here, not through the properties: one call
        if options.get("sync_with_dataloader", True) and getattr(
                self.active_dataloader, "end_of_dataloader", False):
            self.sync_gradients = True
            return 0
        step += 1
        self.sync_gradients = step % int(options.get("num_steps") or 1) == 0
        return step

    def _add_dataloader(self, dataloader: Any) -> None:
        """A dataloader started iterating: it becomes the active one (nesting is supported)."""
        self.active_dataloader = dataloader
        self.dataloader_references.append(dataloader)

    def _remove_dataloader(self, dataloader: Any) -> None:
        """A dataloader finished: the previous one (or none) becomes active again."""
        if dataloader in self.dataloader_references:
            self.dataloader_references.remove(dataloader)
        self.active_dataloader = self.dataloader_references[-1]

    def __repr__(self) -> str:
        return (f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: "
                f"{self.end_of_dataloader}\nExtra samples added: {self.remainder}\n"
                f"Gradient accumulation plugin: {self.plugin_kwargs}\n")

    @classmethod
    def _reset_state(cls) -> None:
        cls._shared_state.clear()

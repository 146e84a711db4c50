"""Where a batch stands in gradient accumulation: :class:`MicroStep`, the per-micro-step
context ``accumulate()`` decides and hands to the strategy and the prepared optimizers and
schedulers; and :class:`GradientState`, Accelerate's process-wide view of it (plus which
dataloader is being iterated), which they no longer read."""

from __future__ import annotations

from typing import Any

from accel_state.shared import SharedDict

__all__ = ["GradientState", "MicroStep"]


class MicroStep:
    """One batch's place in gradient accumulation, as ``accumulate()`` decided it.

    The Accelerator passes it to ``Strategy.backward``, ``Strategy.accumulation_context``
    and ``Strategy.should_step`` and gives it to the optimizers and schedulers it wraps, so
    the boundary reaches them through the interface rather than a global. One object per
    process, updated in place on each batch (the hot path allocates nothing);
    :class:`GradientState` reads it.
    """

    __slots__ = ("sync", "reduce", "index", "end_of_dataloader")

    def __init__(self) -> None:
        #: this batch ends an accumulation cycle: optimizers and schedulers step after it
        self.sync = True
        #: its gradients are reduced across processes now (``sync``, or the plugin's
        #: ``sync_each_batch``); False: the strategy may defer the reduction (``no_sync``)
        self.reduce = True
        #: batches of the current cycle so far, this one included (0 once a dataloader's
        #: end closed the cycle): the Accelerator's ``step``
        self.index = 0
        #: this is the last batch of the active dataloader
        self.end_of_dataloader = False

    def __repr__(self) -> str:
        return (f"MicroStep(sync={self.sync}, reduce={self.reduce}, index={self.index}, "
                f"end_of_dataloader={self.end_of_dataloader})")


class GradientState:
    """Gradient-synchronisation state shared by the accelerator, optimizers and dataloaders.

    ``sync_gradients`` is False on micro-steps of gradient accumulation (read from
    :attr:`micro_step`, the one place it is kept); dataloaders report ``end_of_dataloader``
    and ``remainder`` here so accumulation and ``gather_for_metrics`` can react to the last
    batch.
    """

    _shared_state: dict[str, Any] = SharedDict()

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        self.__dict__ = self._shared_state
        if not self.initialized:
            #: the current batch's place in accumulation, handed to strategies and wrappers
            self.micro_step = MicroStep()
            self.active_dataloader: Any = None
            self.dataloader_references: list[Any] = [None]
            self.plugin_kwargs: dict[str, Any] = {}
            self.is_xla_gradients_synced = False
        if gradient_accumulation_plugin is not None:
            # every field, defaults included: a default such as adjust_scheduler=True matters
            to_dict = getattr(gradient_accumulation_plugin, "to_dict", None)
            self.plugin_kwargs = dict(to_dict() if to_dict else vars(gradient_accumulation_plugin))

    @property
    def sync_gradients(self) -> bool:
        return self.micro_step.sync

    @sync_gradients.setter
    def sync_gradients(self, sync: bool) -> None:  # Accelerate's code assigns it
        self._set_sync_gradients(sync)

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
        micro = self.micro_step
        micro.sync = sync_gradients
        micro.reduce = sync_gradients or bool(self.plugin_kwargs.get("sync_each_batch", False))

    def _advance(self, step: int) -> int:
        """``accumulate()``'s rule for one batch, in one call since it runs on every
        micro-step: the batch ends a cycle (``sync_gradients``) every ``num_steps`` batches,
        and on the last batch of the active dataloader when ``sync_with_dataloader``.
        Updates :attr:`micro_step` and returns the batch count after this one (0 once a
        dataloader's end reset it)."""
        options = self.plugin_kwargs  # read here, not through the properties: one call
        micro = self.micro_step
        end = getattr(self.active_dataloader, "end_of_dataloader", False)
        micro.end_of_dataloader = end
        if end and options.get("sync_with_dataloader", True):
            micro.sync = micro.reduce = True
            micro.index = 0
            return 0
        step += 1
        micro.sync = sync = step % int(options.get("num_steps") or 1) == 0
        micro.reduce = sync or options.get("sync_each_batch", False)
        micro.index = step
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

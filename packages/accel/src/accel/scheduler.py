"""``AcceleratedScheduler``: steps the LR schedule in step with the optimizers."""

from __future__ import annotations

from typing import Any

from accel_state import GradientState, PartialState

from accel._module_compat import forward_to

__all__ = ["AcceleratedScheduler"]


class AcceleratedScheduler:
    """Wraps an LR scheduler so its schedule is defined over the *unsharded* dataloader.

    Each data-parallel replica sees ``1 / num_processes`` of the batches, so one optimizer
    step covers ``num_processes`` steps of the user's schedule: the scheduler steps that many times
    (once with ``split_batches``, where the batch itself was split). It does not step on
    accumulation micro-steps nor after an optimizer step skipped for overflow.
    """

    def __init__(self, scheduler: Any, optimizers: Any, step_with_optimizer: bool = True,
                 split_batches: bool = False, *, num_processes: int | None = None,
                 strategy: Any = None, micro_step: Any = None) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
        self.split_batches = split_batches
        #: data-parallel replicas one optimizer step covers (the Accelerator passes its
        #: strategy's ``dp_size``); None: every process
        self.num_processes = num_processes
        self.step_with_optimizer = step_with_optimizer
        #: Accelerate's view of the accumulation state; its plugin says ``adjust_scheduler``
        self.gradient_state = GradientState()
        #: the Accelerator's strategy, asked whether this batch steps (None: at a boundary)
        self._strategy = strategy
        self._micro_step = micro_step if micro_step is not None \
            else self.gradient_state.micro_step

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        micro = self._micro_step
        steps = micro.sync if self._strategy is None else self._strategy.should_step(micro)
        if not steps:
            if self.gradient_state.adjust_scheduler:
                self.scheduler._step_count += 1
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        replicas = self.num_processes if self.num_processes is not None \
            else PartialState().num_processes
        repeats = 1 if self.split_batches else replicas
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(repeats):
            if total is not None and self.scheduler._step_count > total:
                break  # e.g. OneCycleLR raises past its last step
            self.scheduler.step(*args, **kwargs)

    # Delegation -------------------------------------------------------------------------------
    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        return self.scheduler.print_lr(*args, **kwargs)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.state")

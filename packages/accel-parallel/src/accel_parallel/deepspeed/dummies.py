"""``DummyOptim`` / ``DummyScheduler``: stand-ins for an optimizer and a scheduler that the
DeepSpeed config defines (its ``optimizer`` / ``scheduler`` sections); ``EngineScheduler``:
what ``prepare`` returns for a scheduler the engine steps itself (Accelerate's
``DeepSpeedSchedulerWrapper``).

Pass them to ``accelerator.prepare`` like real ones; DeepSpeed builds the real objects
from the config, and their ``"auto"`` parameters are filled from these (``lr``,
``weight_decay``, ``warmup_num_steps``, ``total_num_steps``, any keyword given).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["DummyOptim", "DummyScheduler", "EngineScheduler"]


class DummyOptim(torch.optim.Optimizer):
    """The parameters to train and the values for the config's ``optimizer.params``
    "auto" entries. An ``Optimizer`` so that ``prepare`` sorts it as one; never steps."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, weight_decay: float = 0,
                 **kwargs: Any) -> None:
        self.params = params = list(params)
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def config_values(self) -> dict[str, Any]:
        """Values for "auto" entries of the config's ``optimizer.params``."""
        return {"lr": self.lr, "weight_decay": self.weight_decay, **self.kwargs}

    def step(self, closure: Any = None) -> Any:  # pragma: no cover - replaced by prepare
        from accel_state import ConfigurationError

        raise ConfigurationError("DummyOptim only stands for the DeepSpeed config's optimizer: "
                                 "step the object accelerator.prepare() returned instead.")


class DummyScheduler(torch.optim.lr_scheduler.LRScheduler):
    """The values for the config's ``scheduler.params`` "auto" entries, or, without a
    scheduler in the config, ``lr_scheduler_callable(optimizer)`` builds one for
    DeepSpeed's optimizer."""

    def __init__(self, optimizer: Any, total_num_steps: int | None = None,
                 warmup_num_steps: int = 0,
                 lr_scheduler_callable: Callable[[Any], Any] | None = None,
                 **kwargs: Any) -> None:
        # not LRScheduler.__init__: there is no schedule to start; isinstance is what counts
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs
        self._step_count = 0

    def config_values(self) -> dict[str, Any]:
        """Values for "auto" entries of the config's ``scheduler.params``."""
        values = {"warmup_num_steps": self.warmup_num_steps, **self.kwargs}
        if self.total_num_steps is not None:
            values["total_num_steps"] = self.total_num_steps
        return values

    def step(self, epoch: Any = None) -> None:  # pragma: no cover - replaced by prepare
        from accel_state import ConfigurationError

        raise ConfigurationError("DummyScheduler only stands for the DeepSpeed config's "
                                 "scheduler: step the object accelerator.prepare() returned.")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None


class EngineScheduler:
    """A scheduler the DeepSpeed engine steps itself (at each accumulation boundary):
    ``step`` is a no-op, everything else is the scheduler's."""

    def __init__(self, scheduler: Any, optimizer: Any) -> None:
        self.scheduler = scheduler
        self.optimizer = optimizer  # the Accelerator pairs schedulers with optimizers by this
        self._step_count = 0

    def step(self, *args: Any, **kwargs: Any) -> None:
        return None

    def get_last_lr(self) -> Any:
        return self.scheduler.get_last_lr()

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.scheduler, name)

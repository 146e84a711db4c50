"""A third-party strategy with typed options, registered through the ``accel.strategies``
entry point (this folder's README): a DDP variant that counts (and optionally prints) its
gradient all-reduces. It uses accel-parallel's public interface only, as another package
would, and is chosen through every route: its kwargs handler (by data), ``ACCEL_STRATEGY``
/ ``accel launch --strategy`` / a config file's ``strategy:``, ``Accelerator(strategy=...)``
or an instance. It needs a process group (its ``check``), so it is refused by name in a
one-process run."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from accel_parallel import DDPStrategy, StrategyPreset
from accel_state import KwargsHandler

__all__ = ["LOUD", "LoggedDDPKwargs", "LoggedDDPStrategy", "Reduction"]


class Reduction(enum.Enum):
    """How the all-reduced gradients are combined."""

    MEAN = "mean"
    SUM = "sum"


@dataclass
class LoggedDDPKwargs(KwargsHandler):
    """The options of ``test-logged-ddp``: its kwargs handler and its ``--strategy_config``."""

    #: print one line every ``log_every`` all-reduces (with ``verbose``)
    log_every: int = 1
    #: the name printed
    label: str = "logged-ddp"
    #: average the gradients over the processes (DDP's own) or sum them
    reduction: Reduction = Reduction.MEAN
    #: print the lines at all
    verbose: bool = False
    #: where the lines go
    stream: Literal["stdout", "stderr"] = "stdout"
    #: stop counting after this many (None: never)
    limit: int | None = None


#: a preset of it: every all-reduce printed
LOUD = StrategyPreset("test-logged-ddp", {"verbose": True, "log_every": 1},
                      "test-logged-ddp printing every all-reduce")


class LoggedDDPStrategy(DDPStrategy):
    """DDP whose gradient all-reduce goes through a hook that counts it."""

    name = "test-logged-ddp"
    priority = 70
    handler_kinds = {"logged_ddp": LoggedDDPKwargs}

    def __init__(self, state: Any, *, options: LoggedDDPKwargs | None = None,
                 **kwargs: Any) -> None:
        super().__init__(state, **kwargs)
        self.logged = options or LoggedDDPKwargs()
        self.reductions = 0

    @classmethod
    def claims(cls, config: Any) -> bool:
        return "logged_ddp" in config.handlers

    @classmethod
    def from_config(cls, config: Any) -> LoggedDDPStrategy:
        return cls(config.state, precision=config.precision,
                   options=config.handlers.get("logged_ddp"))

    def prepare_model(self, model: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        model = super().prepare_model(model, **kwargs)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model.register_comm_hook(None, self._all_reduce)
        return model

    def _all_reduce(self, state, bucket):  # noqa: ANN001 (torch checks the annotations)
        limit = self.logged.limit
        if limit is None or self.reductions < limit:
            self.reductions += 1
        if self.logged.verbose and self.reductions % self.logged.log_every == 0:
            print(f"{self.logged.label}: all-reduce {self.reductions}", flush=True)
        tensor = bucket.buffer()
        if self.logged.reduction is Reduction.MEAN:
            tensor.div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()
        return future.then(lambda done: done.value()[0])

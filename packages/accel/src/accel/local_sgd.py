"""Local SGD: each replica steps on its own gradients and parameters are averaged every
``local_sgd_steps`` optimizer steps, instead of all-reducing gradients on every step
(Accelerate's ``accelerate.local_sgd.LocalSGD``). Fewer, larger exchanges: useful where the
network, not compute, limits data parallelism.
"""

from __future__ import annotations

from typing import Any

import torch
from accel_parallel import is_sharded_model
from accel_state import ConfigurationError, reduce

from accel._module_compat import forward_to

__all__ = ["LocalSGD"]

class LocalSGD:
    """Context manager around the training loop; call :meth:`step` after each optimizer step.

    Inside the block gradients are not synchronised (the strategy's ``no_sync``); every
    ``local_sgd_steps`` calls of :meth:`step`, and when the block ends, the parameters are
    averaged over the data-parallel replicas. With one process it does nothing.

    Args:
        accelerator: the ``Accelerator`` that prepared ``model``.
        model: the prepared model (DDP or a plain module; sharded models cannot be averaged).
        local_sgd_steps: optimizer steps between two averages (1 or more).
        enabled: False turns LocalSGD off (plain data parallelism).
    """

    def __init__(self, accelerator: Any, model: torch.nn.Module, local_sgd_steps: int,
                 enabled: bool = True) -> None:
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int) \
                or local_sgd_steps < 1:
            raise ConfigurationError(
                f"LocalSGD(local_sgd_steps={local_sgd_steps!r}) must be a positive integer: the "
                "number of optimizer steps between two parameter averages.")
        strategy = accelerator._strategy
        if enabled and (not strategy.replicates_parameters or is_sharded_model(model)):
            raise ConfigurationError(
                f"LocalSGD averages whole parameters, but this run's strategy "
                f"({strategy.name!r}, {accelerator.distributed_type.value}) shards them; use it "
                "with DDP (or one process), or pass enabled=False.")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = bool(enabled) and strategy.dp_size > 1
        self.num_steps = 0
        self._strategy = strategy
        self._no_sync: Any = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self._strategy.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            try:
                if exc_info[0] is None:
                    self._sync_and_avg_model_params()
            finally:
                self._no_sync.__exit__(*exc_info)

    def step(self) -> None:
        """Count one optimizer step; average the parameters every ``local_sgd_steps``."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_avg_model_params()

    @torch.no_grad()
    def _sync_and_avg_model_params(self) -> None:
        """Average every parameter over the data-parallel group: one all-reduce per dtype
        (parameters packed into one flat tensor) rather than one per parameter."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for param in self.model.parameters():
            by_dtype.setdefault(param.dtype, []).append(param)
        group = self._strategy.dp_group
        for params in by_dtype.values():
            flat = torch.cat([p.detach().reshape(-1) for p in params])
            averaged = reduce(flat, "mean", group=group)
            for param, value in zip(params, averaged.split([p.numel() for p in params]),
                                    strict=True):
                param.copy_(value.view_as(param))


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel")

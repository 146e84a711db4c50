"""Cross-rank signals of the ``Accelerator``: the trigger flag (``set_trigger`` /
``check_trigger``) and forcing one gradient synchronisation (``trigger_sync_in_backward``).

A trigger lets one process tell every other one "stop" (early stopping, a NaN loss, a
time limit) without each rank deciding on its own and deadlocking the rest in the next
collective: any rank sets it, and the next ``check_trigger()`` — a collective every rank
calls at the same point — answers True everywhere.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from accel_state import reduce

__all__ = ["TriggerMixin"]


class TriggerMixin:
    """``set_trigger``, ``check_trigger`` and ``trigger_sync_in_backward`` of ``Accelerator``
    (expects ``device``, ``num_processes`` and ``_strategy``)."""

    _strategy: Any
    #: set by ``set_trigger()`` on this process, cleared by ``check_trigger()``
    _trigger_set: bool = False

    def set_trigger(self) -> None:
        """Raise the trigger on this process; the next :meth:`check_trigger` returns True on
        every process. For example, stop when any rank sees a NaN loss::

            if torch.isnan(loss):
                accelerator.set_trigger()
            if accelerator.check_trigger():
                break
        """
        self._trigger_set = True

    def check_trigger(self) -> bool:
        """True on every process when any process called :meth:`set_trigger` since the last
        check; the trigger is then cleared. A collective (one all-reduce of one number):
        call it on every process at the same point."""
        raised = self._trigger_set
        if getattr(self, "num_processes", 1) > 1:
            flag = torch.tensor([1 if raised else 0], device=self.device)  # type: ignore[attr-defined]
            raised = bool(reduce(flag, reduction="sum").item() > 0)
        if raised:
            self._trigger_set = False
        return raised

    def trigger_sync_in_backward(self, model: torch.nn.Module
                                 ) -> contextlib.AbstractContextManager[None]:
        """Make the backward inside the block synchronise ``model``'s gradients although its
        forward ran under :meth:`no_sync` (or an accumulation micro-step)::

            with accelerator.no_sync(model):
                loss_a = model(batch_a).sum()
                loss_b = model(batch_b).sum()
            accelerator.backward(loss_a)          # local only
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(loss_b)      # all-reduces the accumulated gradients

        DDP models (also DDP inside N-D parallelism) and FSDP2 models (which decide at
        backward time: a backward inside both ``no_sync`` and this block reduce-scatters);
        a no-op in a single process and with DeepSpeed (the engine reduces at the
        accumulation boundary).
        """
        return self._strategy.sync_in_backward(model)

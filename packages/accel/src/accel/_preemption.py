"""Preemption: save one last checkpoint when the job is told to stop (SIGTERM).

Schedulers (SLURM, Kubernetes, spot instances) announce a preemption with SIGTERM; `accel
launch` forwards it to every worker. Saving inside a signal handler is unsafe (a rank may
be in the middle of a collective), so the handler only records the request and the
training loop asks at a step boundary::

    accelerator.handle_preemption()              # once, before the loop
    for batch in loader:
        ...
        if accelerator.save_state_if_preempted():  # every rank agrees, then saves
            break

:attr:`Accelerator.preemption_requested` is agreed across ranks (one tiny all-reduce), so
every rank stops at the same step even if the signal reached them at different times.
The launcher gives the workers ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds (30 by default)
before SIGKILL: raise it when a checkpoint takes longer to write.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["PreemptionMixin"]


class _Flag:
    """Set by the signal handler; read at step boundaries."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}


class PreemptionMixin:
    """The Accelerator's preemption API (see the module docstring)."""

    _preemption: _Flag | None = None

    def handle_preemption(self, signals: Iterable[int] = (signal.SIGTERM,)) -> None:
        """Record ``signals`` (default SIGTERM) as a preemption request instead of dying.

        Call from the main thread, once, before the training loop; calling again is a no-op.
        """
        if self._preemption is not None:
            return
        if threading.current_thread() is not threading.main_thread():
            from accel_state.errors import ConfigurationError

            raise ConfigurationError("handle_preemption() must be called from the main thread "
                                     "(Python installs signal handlers only there).")
        flag = _Flag()

        def record(signum: int, frame: Any) -> None:
            flag.signum = signum

        for sig in signals:
            flag.previous[int(sig)] = signal.signal(sig, record)
        self._preemption = flag

    @property
    def preemption_requested(self) -> bool:
        """True on every rank once any rank received the signal (collective: call on all)."""
        flag = self._preemption
        local = flag is not None and flag.signum is not None
        if getattr(self, "num_processes", 1) <= 1:
            return local
        import torch
        from accel_state import reduce

        mine = torch.tensor([1.0 if local else 0.0], device=self.device)  # type: ignore[attr-defined]
        return bool(reduce(mine, reduction="sum").item() > 0)

    def save_state_if_preempted(self, output_dir: Any = None, **save_kwargs: Any) -> bool:
        """When preemption was requested: save a checkpoint (waited for) and return True."""
        if not self.preemption_requested:
            return False
        self.save_state(output_dir, **save_kwargs)  # type: ignore[attr-defined]
        self.wait_for_checkpoint()  # type: ignore[attr-defined]
        return True

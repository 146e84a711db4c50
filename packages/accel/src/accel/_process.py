"""The ``Accelerator``'s view of the processes: ranks, device, collectives and the
run-on-some-processes helpers, read from its ``AcceleratorState`` (``self.state``).

Kept out of ``accelerator.py`` (a mixin) so the facade's class stays a thin list of what
it delegates; every method here is one call into accel-state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from accel_state import DistributedType, gather, pad_across_processes, reduce

__all__ = ["ProcessMixin"]

_F = TypeVar("_F", bound=Callable[..., Any])

class ProcessMixin:
    """Process views and collectives of ``Accelerator`` (expects ``state``, ``_strategy``)."""

    state: Any
    _strategy: Any

    # -- views of the process state ----------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def distributed_type(self) -> DistributedType:
        """The strategy's (``MULTI_CPU``, ``MULTI_GPU``, ``FSDP``, ``DEEPSPEED``, ...)."""
        return self._strategy.distributed_type

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        return self.state.use_distributed

    @property
    def multi_device(self) -> bool:
        """Whether the run is distributed over several accelerators of one kind (GPUs, XPUs,
        NPUs, ...) with plain data parallelism — Accelerate's meaning: False for CPU
        processes (``MULTI_CPU``) and for FSDP / DeepSpeed runs, which have their own type."""
        return self._strategy.multi_device

    # -- collectives -------------------------------------------------------------------------
    def gather(self, tensor: Any) -> Any:
        """All-gather (nested) tensors from every process, concatenated on dim 0."""
        return gather(tensor)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return reduce(tensor, reduction, scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0,
                             pad_first: bool = False) -> Any:
        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def wait_for_everyone(self) -> None:
        """Barrier; a rank first lets a save the main process makes alone commit."""
        from accel._checkpoint_gate import checkpoint_sync_point  # checkpoints load on use

        checkpoint_sync_point(self, "wait_for_everyone")
        self.state.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine."""
        self.state.print(*args, **kwargs)

    def split_between_processes(self, inputs: Any, apply_padding: bool = False
                                ) -> contextlib.AbstractContextManager[Any]:
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.main_process_first()

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.local_main_process_first()

    def on_main_process(self, function: _F) -> _F:
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: _F) -> _F:
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: _F) -> _F:
        return self.state.on_last_process(function)

    def on_process(self, function: _F | None = None, process_index: int | None = None) -> Any:
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(self, function: _F | None = None,
                         local_process_index: int | None = None) -> Any:
        return self.state.on_local_process(function, local_process_index=local_process_index)

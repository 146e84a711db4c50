"""Where a prepared loader puts each batch: the two decisions made per batch on the hot path
(kept apart from the loader so that each is small and read on its own)."""

from __future__ import annotations

from typing import Any

import torch
from accel_state.operations import send_to_device

__all__ = ["onto_cpu", "async_safe"]


def onto_cpu(batch: Any) -> Any:
    """The CPU device's placement, on every batch: batches of CPU tensors (what a CPU
    DataLoader yields) are returned as they are, without a ``Tensor.to`` call per tensor;
    anything else goes through ``send_to_device``."""
    kind = type(batch)
    if kind is torch.Tensor:
        return batch if batch.is_cpu else send_to_device(batch, "cpu")
    items = batch if kind is list or kind is tuple else (
        batch.values() if kind is dict else None)
    if items is not None:
        for item in items:  # a plain loop: no generator frame per batch
            if type(item) is not torch.Tensor or not item.is_cpu:
                break
        else:
            return batch
    return send_to_device(batch, "cpu")


def async_safe(device: torch.device | None) -> bool:
    """Copies from host memory to a CUDA device are queued on the stream without waiting
    for the GPU's earlier work: the host buffer is consumed (staged or, when pinned, kept
    alive by torch's host allocator) before the call returns, and kernels that use the
    batch are ordered after the copy on that stream. A blocking copy would stall the CPU
    until the previous step's kernels finish, so this is always done (as ``non_blocking``
    does), while ``non_blocking=True`` keeps its meaning for other devices."""
    return device is not None and device.type == "cuda"

"""Context parallelism: the sequence of each batch split over the ``cp`` mesh dimension.

torch's context-parallel API (``torch.distributed.tensor.experimental.context_parallel``)
swaps SDPA for a ring attention over the ``cp`` ranks and shards the given buffers (inputs,
labels, position ids) along their sequence dimension inside the block. It runs on CUDA
only, so a ``cp_size > 1`` run on another device is refused when the strategy is built,
never run silently on one rank. Gradients of the replicated weights are averaged over the
``cp`` ranks by FSDP2, which shards over ``dp_shard_cp`` (docs/parallel.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from accel_state import ConfigurationError

__all__ = ["check_context_parallel_device", "context_parallel_block"]


def check_context_parallel_device(cp_size: int, device: torch.device) -> None:
    """``cp_size > 1`` needs CUDA (torch's ring attention over SDPA's CUDA kernels)."""
    if cp_size > 1 and torch.device(device).type != "cuda":
        raise ConfigurationError(
            f"ParallelismConfig(cp_size={cp_size}) needs CUDA: torch's context parallelism "
            f"runs SDPA's ring attention on CUDA devices only, and this run's device is "
            f"{torch.device(device)}. Set cp_size=1 (use tp_size or dp_shard_size for these "
            "processes), or run on GPUs.")


@contextlib.contextmanager
def context_parallel_block(cp_mesh: Any, buffers: Sequence[torch.Tensor] | None = None,
                           buffer_seq_dims: Sequence[int] | None = None,
                           no_restore_buffers: Any = None,
                           comm_strategy: str = "allgather") -> Iterator[None]:
    """Inside the block SDPA is context-parallel over ``cp_mesh`` and each of ``buffers``
    holds this rank's part of its sequence dimension (``buffer_seq_dims``, one per buffer);
    they are restored afterwards unless listed in ``no_restore_buffers``."""
    from torch.distributed.tensor.experimental import context_parallel

    buffers = list(buffers or [])
    seq_dims = list(buffer_seq_dims or [])
    if len(seq_dims) != len(buffers):
        raise ConfigurationError(
            f"maybe_context_parallel got {len(buffers)} buffer(s) but {len(seq_dims)} "
            "buffer_seq_dims: give the sequence dimension of each buffer.")
    try:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
    except ImportError:  # older torch: all-gather only
        set_rotate_method = None
    if set_rotate_method is not None:
        set_rotate_method(comm_strategy)
    with context_parallel(cp_mesh, buffers=buffers, buffer_seq_dims=seq_dims,
                          no_restore_buffers=set(no_restore_buffers or ())):
        yield

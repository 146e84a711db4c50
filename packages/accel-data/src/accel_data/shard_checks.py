"""The checks and the wrap-around every sharder shares (batch samplers, iterable datasets,
the dispatcher, process groups): a world that names a real process, a batch that splits
evenly, and the endless repetition that completes a short last round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["check_split", "check_world", "wrap_around"]


def check_world(num_processes: Any, process_index: Any) -> None:
    """Reject a world size / rank pair that cannot describe a real process."""
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ConfigurationError(
            f"num_processes must be a positive int, got {num_processes!r}; pass the world size "
            "(torch.distributed.get_world_size()).")
    if (isinstance(process_index, bool) or not isinstance(process_index, int)
            or not 0 <= process_index < num_processes):
        raise ConfigurationError(
            f"process_index must be an int in [0, {num_processes - 1}] for "
            f"num_processes={num_processes}, got {process_index!r}; pass this process's rank.")


def check_split(batch_size: int | None, num_processes: int, owner: str) -> None:
    """``split_batches`` cuts one batch into ``num_processes`` equal slices."""
    if batch_size is None:
        raise ConfigurationError(
            f"split_batches=True needs the batch size of {owner}, which has no `batch_size` "
            "attribute; give it a `batch_size` attribute or use split_batches=False.")
    if batch_size % num_processes != 0:
        raise ConfigurationError(
            f"To use split_batches=True, the batch size ({batch_size}) of {owner} needs to "
            f"be a round multiple of the number of processes ({num_processes}): each batch "
            f"is cut into {num_processes} equal slices, and {batch_size} is not divisible by "
            f"{num_processes}. Use a batch size that is a multiple of {num_processes}, or "
            "split_batches=False.")


def wrap_around(head: Sequence[Any], start: int, count: int) -> list[Any]:
    """``count`` items of the endless repetition of ``head``, from position ``start``."""
    size = len(head)
    return [head[(start + i) % size] for i in range(count)]

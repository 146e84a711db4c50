"""The data-parallel world a prepared loader shards over: every process, or a process group.

Under tensor parallelism (or any strategy whose data-parallel world is smaller than the
process world) the processes that must see the same batches form one data-parallel
rank, and the ranks that share out the data form a ``torch.distributed`` process group.
The loaders then take ``num_processes``/``process_index`` from that group and keep the
data traffic (the dispatcher's batches, ``gather_for_metrics``) inside it; these helpers
read and check that world in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist
from accel_state.errors import ConfigurationError
from accel_state.groups import group_size

from accel_data.shard_checks import check_world

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["resolve_world"]


def _live() -> bool:
    return dist.is_available() and dist.is_initialized()


def resolve_world(num_processes: int | None, process_index: int | None,
                  group: ProcessGroup | None, owner: str) -> tuple[int, int]:
    """``(num_processes, process_index)`` with what the caller left out filled in.

    Without ``group`` they come from torch.distributed's world (or one process). With
    one they come from the group, and given values must match it: a dispatcher sending
    ``num_processes`` parts to a group of another size would wait forever.
    """
    if group is None:
        num = num_processes if num_processes is not None else group_size(None)
        index = process_index if process_index is not None else (
            dist.get_rank() if _live() else 0)
        check_world(num, index)
        return num, index
    size = group_size(group, owner)
    rank = dist.get_rank(group)
    num = size if num_processes is None else num_processes
    index = rank if process_index is None else process_index
    check_world(num, index)
    if (num, index) != (size, rank):
        raise ConfigurationError(
            f"{owner} got num_processes={num}, process_index={index}, but group={group!r} has "
            f"{size} processes and this one is its rank {rank}; leave num_processes and "
            "process_index as None (read from the group) or pass the group's own values.")
    return num, index

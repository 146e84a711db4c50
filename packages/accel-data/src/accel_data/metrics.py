"""``gather_for_metrics``: gather an evaluation step's outputs without the padding samples.

With ``even_batches`` the last global batch of an epoch is completed with samples from
the epoch's start; the loader counts exactly how many samples of that batch are real
(``remainder``) and ranks hold their parts in order, so keeping the first ``remainder``
rows of the last gathered batch gives exactly the dataset, once. On the last batch the
parts may also differ in size across ranks (dispatched batches, ``even_batches=False``
with ``split_batches``): they are gathered by size, never padded into the result.
With a data-parallel ``group`` (tensor parallelism) only its processes are gathered: the
other groups hold copies of the same samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from accel_state.groups import group_size
from accel_state.operations import gather, gather_object, recursively_apply
from accel_state.state import GradientState

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["gather_for_metrics"]


def _only_tensors(data: Any) -> bool:
    try:
        recursively_apply(lambda t: t, data, error_on_other_type=True)
    except TypeError:
        return False
    return True


def _gather_by_size(data: Any, group: ProcessGroup | None) -> Any:
    """All-gather tensors whose dim 0 may differ across ranks: exact rows, rank order."""
    world = group_size(group, "gather_for_metrics")
    if world == 1:
        return data
    leaves: list[torch.Tensor] = []
    recursively_apply(leaves.append, data)
    if not leaves:
        return data
    leaves = [t if t.ndim else t[None] for t in leaves]
    local = torch.tensor([t.shape[0] for t in leaves], dtype=torch.int64, device=leaves[0].device)
    sizes = gather(local, group=group).view(world, -1).cpu()
    widest = sizes.max(dim=0).values.tolist()
    padded = []
    for t, width in zip(leaves, widest):
        if t.shape[0] < width:
            t = torch.cat([t, t.new_zeros((width - t.shape[0], *t.shape[1:]))])
        padded.append(t)
    every = gather(padded, group=group)
    out = iter([torch.cat([chunk[: int(sizes[r, i])] for r, chunk in enumerate(
        full.split(widest[i]))]) for i, full in enumerate(every)])
    return recursively_apply(lambda _: next(out), data)


def gather_for_metrics(input_data: Any, use_gather_object: bool = False,
                       group: ProcessGroup | None = None) -> Any:
    """Gather ``input_data`` from every rank, dropping the duplicates of the last batch.

    Tensors (nested in lists, tuples, dicts) are concatenated along dim 0 in rank order;
    anything else, or ``use_gather_object=True``, goes through ``gather_object`` (a list,
    per-rank lists concatenated). Called once per batch of a prepared loader over a sized
    map-style dataset, the results of an epoch hold exactly ``len(dataset)`` rows, in the
    loader's order. ``group``: the data-parallel group the loader was prepared with
    (``prepare_data_loader(group=...)``); only its processes are gathered.
    """
    state = GradientState()
    at_end = state.end_of_dataloader
    if use_gather_object or not _only_tensors(input_data):
        data = gather_object(input_data, group=group)
    elif at_end:
        data = _gather_by_size(input_data, group)
    else:
        return gather(input_data, group=group)
    remainder = state.remainder if at_end else 0
    if remainder <= 0:
        return data
    if isinstance(data, list) and (use_gather_object or not _only_tensors(data)):
        return data[:remainder]
    return recursively_apply(lambda t: t[:remainder], data)

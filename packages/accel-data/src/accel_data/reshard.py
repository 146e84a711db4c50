"""Where a saved mid-epoch position lands on another number of processes.

A prepared loader's position is saved as ``source_batches``: how many batches of the
user's DataLoader (its own batch size, before sharding) all processes together have
consumed in the epoch. That number does not depend on the world size, so a loader of
any world continues right after it: each process skips ``q`` of its own batches and, when
the position is not a whole number of this world's rounds, the shard first leaves out
the ``s`` batches of an incomplete round (``BatchSamplerShard.start``). The rest of the
epoch is then dealt in Accelerate's order over the new world, with its padding
(``even_batches``, from the epoch's first samples) and dropping (``drop_last``) rules.
Where a loader cannot start mid-round it resumes at the round before and warns, naming
the batches that are seen again.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from torch.utils.data import IterableDataset, SequentialSampler

from accel_data.samplers import ReplayableRandomSampler, SeedableRandomSampler, get_sampler

__all__ = ["Dealing", "dealing", "placement"]

#: index samplers whose order a resumed pass redraws exactly (the prepared loader's own)
_KNOWN_ORDER = (SequentialSampler, SeedableRandomSampler, ReplayableRandomSampler)


class Dealing(NamedTuple):
    """How a prepared loader deals the user's batches over its processes."""

    world: int  #: processes the batches are dealt over
    per_step: int  #: user batches one step of every process takes (1: split or one process)
    start_target: Any  #: what takes a mid-round ``start`` (``None``: it cannot start there)


def dealing(loader: Any) -> Dealing:
    """How ``loader`` (a ``DataLoaderShard`` or a ``DataLoaderDispatcher``) deals batches."""
    if hasattr(loader, "_global_batches"):  # the dispatcher: rank 0 reads for everyone
        world = int(loader.num_processes)
        per_step = 1 if loader.split_batches else world
        return Dealing(world, per_step, loader)
    shard = loader._shard()
    if shard is None and hasattr(loader.dataset, "num_processes"):
        shard = loader.dataset  # an IterableDatasetShard
        if loader.num_workers and loader.persistent_workers:
            # the workers keep the copy of the shard they started with: a start set for one
            # pass would stay in them for the next ones
            return Dealing(shard.num_processes, 1 if shard.split_batches
                           else shard.num_processes, None)
    if shard is None:
        return Dealing(1, 1, None)
    world = int(shard.num_processes)
    return Dealing(world, 1 if shard.split_batches else world, shard)


def placement(loader: Any, consumed: int, saved_world: int | None, epoch: int) -> tuple[int, int]:
    """``(batches this process skips, batches the shard leaves out first)`` that continue
    exactly after ``consumed`` user batches of ``epoch``, saved by ``saved_world``
    processes. Warns where that cannot be exact, naming what is seen again."""
    deal = dealing(loader)
    skip, start = divmod(consumed, deal.per_step)
    if start and deal.start_target is None:
        warnings.warn(
            f"This DataLoader resumes epoch {epoch} after {consumed} of its batches (saved by "
            f"{saved_world} process(es)), but with {deal.world} processes and persistent "
            f"workers over an IterableDataset it can only continue after a whole round of "
            f"{deal.per_step} batches: batches {consumed - start} to {consumed - 1} of the "
            "epoch are seen again. Resume with a number of processes that divides the saved "
            "position, or use persistent_workers=False.", UserWarning, stacklevel=4)
        start = 0
    if saved_world is not None and saved_world != deal.world:
        _warn_unknown_order(loader, consumed, saved_world, deal.world, epoch)
    return skip, start


def _warn_unknown_order(loader: Any, consumed: int, saved_world: int, world: int,
                        epoch: int) -> None:
    """Re-sharding counts positions in the epoch's order: say so where accel cannot know
    that the order is drawn again the same (a user's sampler or iterable dataset)."""
    if isinstance(loader.dataset, IterableDataset):
        source = f"the IterableDataset {type(_inner_dataset(loader.dataset)).__name__}"
        what = "yields its items in the same order"
    else:
        sampler = get_sampler(loader)
        if isinstance(sampler, _KNOWN_ORDER):
            return
        owner = sampler if sampler is not None else loader.batch_sampler
        source = f"the sampler {type(owner).__name__}"
        what = "draws the same order again"
    warnings.warn(
        f"This DataLoader was saved by {saved_world} process(es) after {consumed} of its "
        f"batches in epoch {epoch} and resumes with {world}: the rest of the epoch is dealt "
        f"over the new processes by position, which is exactly-once only if {source} {what} "
        "as in the run that saved it; otherwise samples of that epoch repeat or are "
        "skipped.", UserWarning, stacklevel=5)


def _inner_dataset(dataset: Any) -> Any:
    """The user's dataset under an ``IterableDatasetShard``."""
    return getattr(dataset, "dataset", dataset) if hasattr(dataset, "num_processes") \
        else dataset

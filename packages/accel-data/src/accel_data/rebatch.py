"""Where a saved mid-epoch position lands with another batch size.

``source_batches`` counts batches of the user's DataLoader, so it means samples only
together with that loader's batch size: a mid-epoch state also records ``batch_size``
(samples in one of those batches: the batch sampler's, 1 for a loader of single items,
``None`` for a batch sampler without one) and ``split_batches``. Neither the world size
nor ``split_batches`` changes what one such batch is (split or not, it is ``batch_size``
consecutive samples of the epoch's order), so only the batch size needs converting: a
loader of another batch size continues after the same number of samples when they fill
whole batches of it, and otherwise at the batch before, repeating the few samples in
between rather than skipping any (and says so).
"""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import BatchSampler, IterableDataset

__all__ = ["layout", "rebatched", "source_batch_size"]


def source_batch_size(loader: Any) -> int | None:
    """Samples in one batch of the user's DataLoader under ``loader`` (``None``: unknown)."""
    if not hasattr(loader, "_global_batches"):  # the dispatcher is built as the user's loader
        shard = loader._shard()
        if shard is None and hasattr(loader.dataset, "num_processes"):
            shard = loader.dataset  # an IterableDatasetShard
        if shard is not None:
            return shard.batch_size
    if loader.batch_sampler is not None:
        return getattr(loader.batch_sampler, "batch_size", None)
    # batch_size=None: a batch sampler given as the sampler, else one item at a time
    return getattr(loader.sampler, "batch_size", 1)


def layout(loader: Any) -> dict[str, Any]:
    """What one source batch is, as a mid-epoch state records it."""
    holder = loader if hasattr(loader, "_global_batches") else (
        loader._shard() or (loader.dataset if hasattr(loader.dataset, "num_processes")
                            else None))
    return {"batch_size": source_batch_size(loader),
            "split_batches": bool(getattr(holder, "split_batches", False))}


def _innermost_batches(loader: Any) -> Any:
    """The batch sampler under the shard and skip wrappers (or the index sampler)."""
    node = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    for _ in range(32):  # bounded against self-references
        inner = getattr(node, "batch_sampler", None)
        if inner is None or inner is node:
            break
        node = inner
    return node


def _unseen_order(loader: Any) -> str | None:
    """The batch sampler whose batches accel cannot see to be consecutive chunks of an
    order that does not depend on the batch size (``None``: they are)."""
    if isinstance(loader.dataset, IterableDataset):
        return None  # the loader cuts the items into batches itself
    node = _innermost_batches(loader)
    kind = type(node)
    if isinstance(node, BatchSampler):
        if kind.__iter__ is BatchSampler.__iter__ or (
                kind.__name__ == "BatchSampler" and kind.__module__.startswith("torchdata.")):
            return None
    elif not hasattr(node, "batch_size"):
        return None  # an index sampler: single items
    return kind.__name__


def rebatched(loader: Any, consumed: int, saved_size: int | None, epoch: int) -> int:
    """Batches of ``loader``'s own DataLoader that continue after ``consumed`` batches of
    ``saved_size`` samples: the same samples where they fill whole batches, else the batch
    before (the samples in between are seen again). Warns where that is not exact, naming
    the two batch sizes and the samples repeated."""
    size = source_batch_size(loader)
    if saved_size == size or not consumed:
        return consumed
    saved = f"saved with batch_size={saved_size} after {consumed} of its batches"
    if saved_size is None or size is None:
        warnings.warn(
            f"This DataLoader was {saved} in epoch {epoch} and resumes with batch_size="
            f"{size}: one of the two has no batch size (a batch sampler without a "
            f"`batch_size`), so the samples consumed are unknown. It continues after "
            f"{consumed} batches, which may repeat or skip samples of that epoch; resume "
            "with the batch sampler it was saved with.", UserWarning, stacklevel=4)
        return consumed
    samples = consumed * saved_size
    whole, extra = divmod(samples, size)
    unseen = _unseen_order(loader)
    if not extra and unseen is None:
        return whole
    notes = []
    if extra:
        notes.append(
            f"{samples} is not a multiple of {size}, so it continues after {whole} batches "
            f"({whole * size} samples): samples {whole * size} to {samples - 1} of the epoch "
            f"({extra}) are seen again, none is skipped. Resume with a batch size that "
            f"divides {samples} to continue exactly")
    if unseen is not None:
        notes.append(
            f"the position is converted in samples, which is exact only if the batch sampler "
            f"{unseen} yields consecutive batches of one order that does not depend on its "
            "batch size; otherwise samples of that epoch repeat or are skipped")
    warnings.warn(
        f"This DataLoader was {saved} ({samples} samples) in epoch {epoch} and resumes "
        f"with batch_size={size}: " + "; ".join(notes) + ".", UserWarning, stacklevel=4)
    return whole

"""``DataLoaderConfiguration``: the data options of an ``Accelerator``, validated once.

Accelerate's ``accelerate.utils.DataLoaderConfiguration``; ``prepare_data_loader`` takes
the same fields as keyword arguments, so the class is only a checked bundle of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from accel_state.errors import ConfigurationError

__all__ = ["DataLoaderConfiguration"]

_BOOLS = ("split_batches", "even_batches", "use_seedable_sampler", "non_blocking",
          "use_stateful_dataloader", "exact_resume")
#: fields that tell ``Accelerator.load_state`` what to restore, not how to shard
_RESUME_ONLY = ("exact_resume",)


@dataclass(kw_only=True)
class DataLoaderConfiguration:
    """How ``Accelerator.prepare`` shards every DataLoader.

    Built once and validated on construction: a wrong type raises ``ConfigurationError``
    naming the field, instead of failing later inside a training loop.
    """

    split_batches: bool = field(default=False)
    """The loader's batch size is the total across processes; each batch is cut into
    ``num_processes`` equal slices (the batch size must be a multiple of it). False: every
    process gets whole batches of that size."""

    dispatch_batches: bool | None = field(default=None)
    """Rank 0 alone reads the data and sends each process its part. ``None``: on for an
    ``IterableDataset``, off for a map-style dataset."""

    even_batches: bool = field(default=True)
    """Every process gets the same number of batches: the end of an epoch is completed
    with its first samples (``gather_for_metrics`` drops them). False: exact data, some
    processes get one batch fewer or a shorter one."""

    use_seedable_sampler: bool = field(default=False)
    """Replace a ``RandomSampler`` by a ``SeedableRandomSampler`` even in one process, so
    shuffling is reproducible and a resumed run shuffles alike (always done with several
    processes)."""

    data_seed: int | None = field(default=None)
    """Seed of the seedable sampler (``use_seedable_sampler``; alone it changes nothing, as in
    Accelerate); ``None``: ``torch.initial_seed()``."""

    non_blocking: bool = field(default=False)
    """Copy batches to the device asynchronously (useful with ``pin_memory=True``)."""

    use_stateful_dataloader: bool = field(default=False)
    """Build on torchdata's ``StatefulDataLoader`` (``pip install "accel-data[torchdata]"``),
    whose ``state_dict`` also captures worker and sampler iterator state. As in Accelerate,
    ``Accelerator.load_state`` then also restores each loader's mid-epoch position."""

    exact_resume: bool = field(default=False)
    """accel's own (not Accelerate's): ``Accelerator.load_state`` restores each prepared
    loader's mid-epoch position, so the resumed run continues with the next unseen batch
    (also on another number of processes or batch size) and the script must not skip
    batches itself. False (Accelerate's default): it restores the epoch and its shuffle,
    and the loader starts that epoch from its first batch; the script skips what it has
    seen (``skip_first_batches``, or ``continue`` as diffusers' examples do)."""

    def __post_init__(self) -> None:
        for name in _BOOLS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"DataLoaderConfiguration.{name} must be True or False, got {value!r}; "
                    f"pass {name}={bool(value)!r} if that is what you meant.")
        if self.dispatch_batches is not None and not isinstance(self.dispatch_batches, bool):
            raise ConfigurationError(
                f"DataLoaderConfiguration.dispatch_batches must be True, False or None, got "
                f"{self.dispatch_batches!r}; None picks True for IterableDatasets only.")
        seed = self.data_seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigurationError(
                f"DataLoaderConfiguration.data_seed must be an int or None, got {seed!r}; "
                "pass an integer seed (the same on every process).")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for logging and config files)."""
        return asdict(self)

    def to_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`accel_data.prepare_data_loader`."""
        return {k: v for k, v in self.to_dict().items() if k not in _RESUME_ONLY}

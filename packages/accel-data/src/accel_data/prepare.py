"""``prepare_data_loader``: rebuild a user's DataLoader as this rank's ``DataLoaderShard``.

Usable without an ``Accelerator``: the caller names the world (or it is read from an
initialised ``torch.distributed``, or from a data-parallel process group, see
:mod:`accel_data.groups`). The user's loader is never modified; its dataset, collate
function, worker settings and generator are reused as they are.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from accel_state.errors import ConfigurationError
from accel_state.operations import broadcast_object_list
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

from accel_data.groups import resolve_world
from accel_data.loaders import DataLoaderShard
from accel_data.samplers import SeedableRandomSampler, draw_seed
from accel_data.sharding import BatchSamplerShard, IterableDatasetShard

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["prepare_data_loader"]

# DataLoader settings carried over unchanged (those this torch version accepts).
_CARRIED = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
            "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
            "pin_memory_device", "in_order")
_ACCEPTED = frozenset(inspect.signature(DataLoader.__init__).parameters)


class _ItemShardSampler(Sampler[int]):
    """Index sampler for a ``batch_size=None`` loader: flattens a shard of 1-index batches."""

    def __init__(self, batch_sampler: BatchSamplerShard) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[int]:
        for batch in self.batch_sampler:
            yield from batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def _carried_kwargs(dataloader: DataLoader) -> dict[str, Any]:
    return {key: getattr(dataloader, key) for key in _CARRIED
            if key in _ACCEPTED and hasattr(dataloader, key)}


def _world_seed(seed: int) -> int:
    """Global rank 0's ``seed``, on every process of the world."""
    box = [seed]
    broadcast_object_list(box, from_process=0)
    return int(box[0])


def _shared_seed(data_seed: int | None, sampler: RandomSampler, num_processes: int,
                 group: ProcessGroup | None) -> int:
    """The shuffle seed: ``data_seed``; else, in one process, the user generator's seed or
    one draw from the global RNG (so ``torch.manual_seed`` before preparing fixes it);
    else, with several processes, rank 0's seed broadcast to every rank.

    With a data-parallel ``group`` the seed is global rank 0's, broadcast over the whole
    world, not the group: the processes of *other* groups with the same data-parallel
    rank (tensor-parallel peers) must draw the very same batches."""
    if data_seed is not None:
        return int(data_seed)
    generator = sampler.generator
    if num_processes == 1:
        seed = generator.initial_seed() if generator is not None else draw_seed()
        return seed if group is None else _world_seed(seed)
    seed = generator.initial_seed() if generator is not None else torch.initial_seed()
    if dist.is_available() and dist.is_initialized():
        return _world_seed(seed)
    if num_processes > 1 and generator is None:
        raise ConfigurationError(
            f"Shuffling across num_processes={num_processes} needs the same seed on every rank, "
            "but torch.distributed is not initialised (so rank 0's seed cannot be broadcast) "
            "and no data_seed was given; pass data_seed=<int> (the same on every rank) or "
            "initialise the process group before preparing the loader.")
    return seed


def _is_plain(sampler: RandomSampler) -> bool:
    """No replacement, one pass over the data: what ``shuffle=True`` builds."""
    return not sampler.replacement and getattr(sampler, "_num_samples", None) is None


def _seedable(sampler: Any, data_seed: int | None, num_processes: int, reseed: bool,
              group: ProcessGroup | None) -> Any:
    """A ``RandomSampler`` as a ``SeedableRandomSampler`` seeded alike on all ranks: always
    when it is plain (exact resume), otherwise when ``reseed`` (sharding, or asked for)."""
    if type(sampler) is not RandomSampler or not (reseed or _is_plain(sampler)):
        return sampler
    return SeedableRandomSampler(
        sampler.data_source, replacement=sampler.replacement,
        num_samples=getattr(sampler, "_num_samples", None), generator=sampler.generator,
        data_seed=_shared_seed(data_seed, sampler, num_processes, group))


def _with_index_sampler(batch_sampler: Any, data_seed: int | None, num_processes: int,
                        reseed: bool, group: ProcessGroup | None) -> Any:
    """``batch_sampler`` with its index sampler made seedable (a copy; the user's is untouched)."""
    inner = getattr(batch_sampler, "sampler", None)
    replaced = _seedable(inner, data_seed, num_processes, reseed, group)
    if replaced is inner:
        return batch_sampler
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(replaced, batch_sampler.batch_size, batch_sampler.drop_last)
    clone = copy.copy(batch_sampler)
    clone.sampler = replaced
    return clone


def _prepare_iterable(dataloader: DataLoader, num_processes: int, process_index: int,
                      split_batches: bool, even_batches: bool,
                      kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of the shard loader for an ``IterableDataset``."""
    dataset, batch_size = dataloader.dataset, dataloader.batch_size
    if num_processes == 1:
        return dict(kwargs, dataset=dataset, batch_size=batch_size,
                    drop_last=dataloader.drop_last)
    if batch_size is None:
        if split_batches:
            raise ConfigurationError(
                "split_batches=True cannot split the items of a DataLoader built with "
                "batch_size=None; give the DataLoader a batch_size or use split_batches=False.")
        shard = IterableDatasetShard(dataset, 1, dataloader.drop_last, num_processes,
                                     process_index, even_batches=even_batches)
        return dict(kwargs, dataset=shard, batch_size=None)
    shard = IterableDatasetShard(dataset, batch_size, dataloader.drop_last, num_processes,
                                 process_index, split_batches, even_batches)
    return dict(kwargs, dataset=shard, batch_size=shard.process_batch_size,
                drop_last=dataloader.drop_last)


def _prepare_map(dataloader: DataLoader, num_processes: int, process_index: int,
                 split_batches: bool, even_batches: bool, reseed: bool,
                 data_seed: int | None, kwargs: dict[str, Any],
                 group: ProcessGroup | None) -> dict[str, Any]:
    """Keyword arguments of the shard loader for a map-style dataset."""
    def shard(batch_sampler: Any) -> Any:
        batch_sampler = _with_index_sampler(batch_sampler, data_seed, num_processes, reseed,
                                            group)
        if num_processes == 1:
            return batch_sampler
        return BatchSamplerShard(batch_sampler, num_processes, process_index, split_batches,
                                 even_batches)

    kwargs = dict(kwargs, dataset=dataloader.dataset)
    if dataloader.batch_sampler is not None:
        return dict(kwargs, batch_sampler=shard(dataloader.batch_sampler))
    if isinstance(dataloader.sampler, BatchSampler):  # batches built by the sampler itself
        return dict(kwargs, sampler=shard(dataloader.sampler), batch_size=None)
    sampler = _seedable(dataloader.sampler, data_seed, num_processes, reseed, group)
    if num_processes > 1:
        if split_batches:
            raise ConfigurationError(
                "split_batches=True cannot split the items of a DataLoader built with "
                "batch_size=None; give the DataLoader a batch_size or use split_batches=False.")
        sampler = _ItemShardSampler(BatchSamplerShard(
            BatchSampler(sampler, 1, False), num_processes, process_index, False, even_batches))
    return dict(kwargs, sampler=sampler, batch_size=None)


def _dispatch_kwargs(dataloader: DataLoader, num_processes: int, split_batches: bool,
                     reseed: bool, data_seed: int | None, kwargs: dict[str, Any],
                     group: ProcessGroup | None) -> dict[str, Any]:
    """Keyword arguments of a ``DataLoaderDispatcher``: the user's loader, rebuilt as is."""
    if split_batches and dataloader.batch_size is None:
        raise ConfigurationError(
            "split_batches=True cannot split the items of a DataLoader built with "
            "batch_size=None; give the DataLoader a batch_size or use split_batches=False.")
    kwargs = dict(kwargs, dataset=dataloader.dataset)
    if isinstance(dataloader.dataset, IterableDataset):
        return dict(kwargs, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
    if dataloader.batch_sampler is not None:
        batch_sampler = _with_index_sampler(dataloader.batch_sampler, data_seed, num_processes,
                                            reseed, group)
        return dict(kwargs, batch_sampler=batch_sampler)
    sampler = _seedable(dataloader.sampler, data_seed, num_processes, reseed, group)
    return dict(kwargs, sampler=sampler, batch_size=None)


def _check_batch_sampler(dataloader: DataLoader, split_batches: bool, num_processes: int) -> None:
    """A custom batch_sampler must say its batch size where the sharding needs it."""
    batch_sampler = dataloader.batch_sampler
    if (split_batches and num_processes > 1 and batch_sampler is not None
            and getattr(batch_sampler, "batch_size", None) is None):
        raise ConfigurationError(
            f"split_batches=True needs the total batch size, but the DataLoader's batch_sampler "
            f"{type(batch_sampler).__name__} has no `batch_size` attribute; give it a "
            "`batch_size` attribute (the total across processes) or use split_batches=False.")


def prepare_data_loader(dataloader: DataLoader, device: torch.device | str | None = None,
                        num_processes: int | None = None, process_index: int | None = None,
                        split_batches: bool = False, put_on_device: bool = False, *,
                        rng_types: list[Any] | None = None,
                        dispatch_batches: bool | None = None, even_batches: bool = True,
                        slice_fn_for_dispatch: Callable[..., Any] | None = None,
                        use_seedable_sampler: bool = False, data_seed: int | None = None,
                        non_blocking: bool = False, use_stateful_dataloader: bool = False,
                        group: ProcessGroup | None = None) -> DataLoaderShard:
    """Return a ``DataLoaderShard`` that iterates this rank's part of ``dataloader``.

    ``num_processes``/``process_index`` default to torch.distributed's world size/rank when
    it is initialised, else 1/0. Map-style datasets are sharded by batch
    (``BatchSamplerShard``), iterable ones by item (``IterableDatasetShard``), unless
    ``dispatch_batches`` (default: on for an ``IterableDataset`` with several processes)
    makes rank 0 read and send the batches (``DataLoaderDispatcher``). A plain
    ``RandomSampler`` (``shuffle=True``) always becomes a ``SeedableRandomSampler`` (unlike
    Accelerate, which needs ``use_seedable_sampler``): exact mid-epoch resume is a promise
    of ours. Its seed is ``data_seed``, else the user generator's seed, else one draw from
    the global RNG now (one process) or rank 0's seed (several), so the shards are
    disjoint and ``state_dict()`` records it. Other ``RandomSampler`` samplers (replacement,
    ``num_samples``) are replaced with several processes or ``use_seedable_sampler``/
    ``data_seed``. ``put_on_device=True`` moves each batch to ``device``.

    ``group``: the data-parallel process group when it is smaller than the world (tensor
    parallelism): ``num_processes``/``process_index`` are then its size and this
    process's rank in it (read from it when None), the dispatcher reads on the group's
    rank 0 and sends within the group, and the shuffle seed is global rank 0's for every
    group, so the processes of different groups with the same rank get the same batches.
    Every process of the world must then prepare the loader (the seed is shared once).

    Arguments after ``put_on_device`` are keyword-only: Accelerate's positional order
    continues with ``rng_types`` and ``dispatch_batches``, which a positional call must not
    silently bind to other parameters.
    """
    if not isinstance(dataloader, DataLoader):
        raise ConfigurationError(
            f"prepare_data_loader expects a torch.utils.data.DataLoader, got "
            f"{type(dataloader).__name__}; wrap the dataset in a DataLoader first.")
    if put_on_device and device is None:
        raise ConfigurationError(
            "put_on_device=True needs a target device, but device=None; pass device= "
            "(e.g. torch.device('cuda', local_rank)) or put_on_device=False.")
    num_processes, process_index = resolve_world(num_processes, process_index, group,
                                                 "prepare_data_loader")
    _check_batch_sampler(dataloader, split_batches, num_processes)
    iterable = isinstance(dataloader.dataset, IterableDataset)
    if dispatch_batches is None:
        dispatch_batches = iterable and num_processes > 1
    if dispatch_batches and use_stateful_dataloader:
        raise ConfigurationError(
            "use_stateful_dataloader=True cannot be combined with dispatch_batches=True: only "
            "rank 0 would hold the loader's state. Use one of the two.")
    kwargs = _carried_kwargs(dataloader)
    reseed = not iterable and (num_processes > 1 or group is not None or use_seedable_sampler
                               or data_seed is not None)
    common = {"device": device if put_on_device else None, "non_blocking": non_blocking,
              "loader_seed": data_seed}
    if dispatch_batches and num_processes > 1:
        from accel_data.dispatcher import DataLoaderDispatcher

        kwargs = _dispatch_kwargs(dataloader, num_processes, split_batches, reseed, data_seed,
                                  kwargs, group)
        return _carry_skip(dataloader, DataLoaderDispatcher(
            kwargs.pop("dataset"), split_batches=split_batches, even_batches=even_batches,
            slice_fn=slice_fn_for_dispatch, num_processes=num_processes,
            process_index=process_index, group=group, **common, **kwargs),
            num_processes, split_batches)
    if iterable:
        kwargs = _prepare_iterable(dataloader, num_processes, process_index, split_batches,
                                   even_batches, kwargs)
    else:
        kwargs = _prepare_map(dataloader, num_processes, process_index, split_batches,
                              even_batches, reseed, data_seed, kwargs, group)
    cls: type[DataLoaderShard] = DataLoaderShard
    if use_stateful_dataloader:
        from accel_data.stateful import stateful_class

        cls = stateful_class(DataLoaderShard)
    dataset = kwargs.pop("dataset")
    return _carry_skip(dataloader, cls(dataset, rng_types=rng_types, **common, **kwargs),
                       num_processes, split_batches)


def _carry_skip(source: DataLoader, prepared: DataLoaderShard, num_processes: int,
                split_batches: bool) -> DataLoaderShard:
    """A ``skip_first_batches`` loader keeps its skip once prepared. It counts batches of
    the whole loader: with ``split_batches`` each is split over the processes (so ``k`` of
    them are ``k`` per process); otherwise the processes take whole batches in turn, so
    ``k`` must be a multiple of ``num_processes`` to start every process at the same place.
    """
    from accel_data.skip import SkipDataLoader

    skip = source._pending_skip() if isinstance(source, SkipDataLoader) else 0
    if not skip:
        return prepared
    if not split_batches and skip % num_processes:
        raise ConfigurationError(
            f"skip_first_batches(dataloader, {skip}) before prepare() skips {skip} batches of "
            f"the whole loader, which {num_processes} processes cannot share evenly; skip a "
            f"multiple of {num_processes}, or call skip_first_batches on the prepared loader "
            "(it counts this process's batches).")
    prepared.set_skip_batches(skip if split_batches else skip // num_processes)
    return prepared

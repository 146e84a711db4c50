"""``prepare_data_loader``: rebuild a user's DataLoader as this rank's ``DataLoaderShard``.

Usable without an ``Accelerator``: the caller names the world (or it is read from an
initialised ``torch.distributed``, or from a data-parallel process group, see
:mod:`accel_data.groups`). The user's loader is never modified; its dataset, collate
function, worker settings and generator are reused as they are.
"""

from __future__ import annotations

import copy
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from accel_state.errors import ConfigurationError
from accel_state.operations import broadcast_object_list
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

from accel_data.groups import resolve_world
from accel_data.iterable_shard import IterableDatasetShard
from accel_data.loaders import DataLoaderShard, carried_settings
from accel_data.samplers import ReplayableRandomSampler, SeedableRandomSampler, draw_seed
from accel_data.sharding import BatchSamplerShard

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["prepare_data_loader"]



class _ItemShardSampler(Sampler[int]):
    """Index sampler for a ``batch_size=None`` loader: flattens a shard of 1-index batches."""

    def __init__(self, batch_sampler: BatchSamplerShard) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[int]:
        for batch in self.batch_sampler:
            yield from batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def _world_seed(seed: int) -> int:
    """Global rank 0's ``seed``, on every process of the world."""
    box = [seed]
    broadcast_object_list(box, from_process=0)
    return int(box[0])


def _seedable_seed(data_seed: int | None, group: ProcessGroup | None) -> int | None:
    """``data_seed``; else ``None`` (the sampler takes ``torch.initial_seed()``, as in
    Accelerate), or under torch.distributed global rank 0's initial seed, so that ranks
    seeded differently, and tensor-parallel peers in other groups, still agree."""
    if data_seed is not None:
        return int(data_seed)
    if group is not None or (dist.is_available() and dist.is_initialized()):
        return _world_seed(torch.initial_seed())
    return None


def _index_sampler(sampler: Any, seedable: bool, data_seed: int | None, shard: bool,
                   group: ProcessGroup | None) -> tuple[Any, torch.Generator | None]:
    """The index sampler to use, and the generator to keep in sync across ranks.

    Accelerate's rules: ``use_seedable_sampler`` turns any ``RandomSampler`` into a
    ``SeedableRandomSampler`` on the same generator. Otherwise, when the loader is sharded
    by index, a sampler with a ``generator`` attribute gets one (seeded by one draw from the
    global RNG, now; global rank 0's under torch.distributed) if it has none, and that
    generator is what ``rng_types=["generator"]`` synchronises. Unlike Accelerate the
    user's sampler is not modified (a copy is), and torch's ``RandomSampler`` becomes a
    ``ReplayableRandomSampler`` (same draws) so a resumed pass can redraw its permutation.
    """
    if seedable and isinstance(sampler, RandomSampler):
        return SeedableRandomSampler(
            sampler.data_source, replacement=sampler.replacement,
            num_samples=sampler._num_samples, generator=sampler.generator,
            data_seed=_seedable_seed(data_seed, group)), None
    generator = getattr(sampler, "generator", None)
    synchronized = None
    # with a data-parallel group (tensor parallelism) the peers of other groups must draw
    # the same order too: a shared generator as when sharding (Accelerate needs set_seed)
    if (shard or group is not None) and not seedable and hasattr(sampler, "generator"):
        if generator is None:
            generator = _new_generator()
            seed = draw_seed()
            if group is not None or (dist.is_available() and dist.is_initialized()):
                seed = _world_seed(seed)  # same as Accelerate's where the ranks agree
            generator.manual_seed(seed)
        synchronized = generator
    if type(sampler) is RandomSampler:
        return ReplayableRandomSampler(
            sampler.data_source, replacement=sampler.replacement,
            num_samples=sampler._num_samples, generator=generator), synchronized
    if generator is not getattr(sampler, "generator", None):
        sampler = copy.copy(sampler)
        sampler.generator = generator
    return sampler, synchronized


def _new_generator() -> torch.Generator:
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else "cpu"
    return torch.Generator(device=device)


def _with_index_sampler(batch_sampler: Any, seedable: bool, data_seed: int | None,
                        shard: bool, group: ProcessGroup | None,
                        ) -> tuple[Any, torch.Generator | None]:
    """``batch_sampler`` with its index sampler replaced as :func:`_index_sampler` says (a
    copy; the user's is untouched), and the generator to synchronise."""
    inner = getattr(batch_sampler, "sampler", None)
    replaced, synchronized = _index_sampler(inner, seedable, data_seed, shard, group)
    if replaced is inner:
        return batch_sampler, synchronized
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(replaced, batch_sampler.batch_size,
                            batch_sampler.drop_last), synchronized
    clone = copy.copy(batch_sampler)
    clone.sampler = replaced
    return clone, synchronized


def _prepare_iterable(dataloader: DataLoader, num_processes: int, process_index: int,
                      split_batches: bool, even_batches: bool,
                      kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of the shard loader for an ``IterableDataset``."""
    dataset, batch_size = dataloader.dataset, dataloader.batch_size
    if num_processes > 1 and not split_batches and _hf_shards(dataset) >= num_processes:
        # As Accelerate: a datasets.IterableDataset of enough shards (files) is split by
        # its own shard(): each process reads only its shards, instead of every item
        dataset = dataset.shard(num_shards=num_processes, index=process_index)
        num_processes = 1
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
    generator = getattr(dataset, "generator", None)  # what rng_types=["generator"] syncs
    return dict(kwargs, dataset=shard, batch_size=shard.process_batch_size,
                drop_last=dataloader.drop_last,
                synchronized_generator=generator if isinstance(generator, torch.Generator)
                else None)


def _hf_shards(dataset: Any) -> int:
    """``n_shards`` of a Hugging Face ``datasets.IterableDataset`` (0 for anything else;
    ``datasets`` is never imported here: a dataset of it means it already is)."""
    datasets = sys.modules.get("datasets")
    iterable = getattr(datasets, "IterableDataset", None) if datasets is not None else None
    if iterable is None or not isinstance(dataset, iterable):
        return 0
    return int(getattr(dataset, "n_shards", 0) or 0)


def _prepare_map(dataloader: DataLoader, num_processes: int, process_index: int,
                 split_batches: bool, even_batches: bool, seedable: bool,
                 data_seed: int | None, kwargs: dict[str, Any],
                 group: ProcessGroup | None) -> dict[str, Any]:
    """Keyword arguments of the shard loader for a map-style dataset."""
    shard_it = num_processes > 1

    def shard(batch_sampler: Any) -> Any:
        batch_sampler, synchronized = _with_index_sampler(batch_sampler, seedable, data_seed,
                                                          shard_it, group)
        kwargs["synchronized_generator"] = synchronized
        if not shard_it:
            return batch_sampler
        return BatchSamplerShard(batch_sampler, num_processes, process_index, split_batches,
                                 even_batches)

    kwargs = dict(kwargs, dataset=dataloader.dataset)
    if dataloader.batch_sampler is not None:
        return dict(kwargs, batch_sampler=shard(dataloader.batch_sampler))
    if isinstance(dataloader.sampler, BatchSampler):  # batches built by the sampler itself
        return dict(kwargs, sampler=shard(dataloader.sampler), batch_size=None)
    sampler, synchronized = _index_sampler(dataloader.sampler, seedable, data_seed, shard_it,
                                           group)
    if shard_it:
        if split_batches:
            raise ConfigurationError(
                "split_batches=True cannot split the items of a DataLoader built with "
                "batch_size=None; give the DataLoader a batch_size or use split_batches=False.")
        sampler = _ItemShardSampler(BatchSamplerShard(
            BatchSampler(sampler, 1, False), num_processes, process_index, False, even_batches))
    return dict(kwargs, sampler=sampler, batch_size=None, synchronized_generator=synchronized)


def _dispatch_kwargs(dataloader: DataLoader, seedable: bool, data_seed: int | None,
                     kwargs: dict[str, Any], group: ProcessGroup | None) -> dict[str, Any]:
    """Keyword arguments of a ``DataLoaderDispatcher``: the user's loader, rebuilt as is,
    without its generator (rank 0's reader draws its base seed from the global RNG, as
    Accelerate's does)."""
    kwargs = dict(kwargs, dataset=dataloader.dataset)
    kwargs.pop("generator", None)
    if isinstance(dataloader.dataset, IterableDataset):
        return dict(kwargs, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
    if dataloader.batch_sampler is not None:
        batch_sampler, _ = _with_index_sampler(dataloader.batch_sampler, seedable, data_seed,
                                               False, group)
        return dict(kwargs, batch_sampler=batch_sampler)
    sampler, _ = _index_sampler(dataloader.sampler, seedable, data_seed, False, group)
    return dict(kwargs, sampler=sampler, batch_size=None)


def _check_split_size(dataloader: DataLoader, num_processes: int) -> None:
    """Accelerate's check (same type, same sentence), plus the fix."""
    batch_size = dataloader.batch_size
    if batch_size is None:
        batch_size = getattr(dataloader.batch_sampler, "batch_size", None)
    if batch_size is None:
        raise ConfigurationError(
            "In order to use `split_batches==True` you must have a `batch_size` attribute "
            "either in the passed `dataloader` or `dataloader.batch_sampler` objects, and it "
            "has to return a natural number. Your `dataloader.batch_size` is None and "
            f"`dataloader.batch_sampler` (`{type(dataloader.batch_sampler)}`) does not have "
            "the `batch_size` attribute set. Give it a `batch_size` (the total across "
            "processes) or use split_batches=False.")
    if batch_size > 1 and batch_size % num_processes != 0:
        raise ConfigurationError(
            f"To use a `DataLoader` in `split_batches` mode, the batch size "
            f"({dataloader.batch_size}) needs to be a round multiple of the number of "
            f"processes ({num_processes}). Use a batch size that is a multiple of "
            f"{num_processes}, or split_batches=False.")


def _warn_if_empty(dataloader: DataLoader, num_processes: int, process_index: int,
                   split_batches: bool) -> None:
    """``drop_last`` with fewer samples than one step takes yields nothing: say so, once,
    on the first process (Accelerate is silent)."""
    if not dataloader.drop_last or process_index != 0 or dataloader.batch_size is None:
        return
    try:
        total = len(dataloader.dataset)
    except TypeError:
        return
    step = dataloader.batch_size * (1 if split_batches else num_processes)
    if total >= step:
        return
    key = (id(dataloader), total, step)
    if key in _WARNED:
        return
    _WARNED.add(key)
    per = ("" if split_batches
           else f" = {num_processes} processes x batch_size {dataloader.batch_size}")
    warnings.warn(
        f"This prepared DataLoader yields no batch: drop_last=True drops every step, since "
        f"the dataset has {total} samples and one step takes {step}{per}. Use a smaller "
        "batch_size, fewer processes, or drop_last=False.", UserWarning, stacklevel=3)


_WARNED: set[tuple[int, int, int]] = set()


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
    ``dispatch_batches`` (default: on for an ``IterableDataset`` when ``put_on_device``, as
    in Accelerate) makes rank 0 read and send the batches (``DataLoaderDispatcher``).
    Samplers and random numbers follow Accelerate 1.15 exactly (see :func:`_index_sampler`;
    ``tests/test_order_golden.py``): with ``use_seedable_sampler`` a ``RandomSampler``
    becomes a ``SeedableRandomSampler`` seeded by ``data_seed`` (else
    ``torch.initial_seed()``); ``data_seed`` alone changes nothing. ``put_on_device=True``
    moves each batch to ``device``.

    ``group``: the data-parallel process group when it is smaller than the world (tensor
    parallelism): ``num_processes``/``process_index`` are then its size and this
    process's rank in it (read from it when None), the dispatcher reads on the group's
    rank 0 and sends within the group, and the seedable sampler's seed is global rank 0's
    for every group, so the processes of different groups with the same rank get the same
    batches. Every process of the world must then prepare the loader.

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
    if split_batches:
        _check_split_size(dataloader, num_processes)
    _check_batch_sampler(dataloader, split_batches, num_processes)
    _warn_if_empty(dataloader, num_processes, process_index, split_batches)
    iterable = isinstance(dataloader.dataset, IterableDataset)
    if dispatch_batches is None:
        dispatch_batches = iterable and put_on_device
    kwargs = carried_settings(dataloader)
    seedable = bool(use_seedable_sampler)
    common = {"device": device if put_on_device else None, "non_blocking": non_blocking,
              "use_stateful_dataloader": use_stateful_dataloader}
    if dispatch_batches:  # also on one process, as Accelerate (its class is the contract)
        from accel_data.dispatcher import DataLoaderDispatcher

        kwargs = _dispatch_kwargs(dataloader, seedable, data_seed, kwargs, group)
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
                              even_batches, seedable, data_seed, kwargs, group)
    if use_stateful_dataloader and type(kwargs.get("batch_sampler")) is BatchSampler:
        kwargs["batch_sampler"] = _stateful_batches(kwargs["batch_sampler"])
    dataset = kwargs.pop("dataset")
    return _carry_skip(dataloader, DataLoaderShard(dataset, rng_types=rng_types, **common,
                                                   **kwargs), num_processes, split_batches)


def _stateful_batches(batch_sampler: BatchSampler) -> BatchSampler:
    """torchdata's own ``BatchSampler`` (same batches, with a state): what a plain
    ``StatefulDataLoader`` builds, so that its states and ours carry the same keys."""
    from accel_data.stateful import stateful_class

    stateful_class(DataLoaderShard)  # torchdata is there, or the error says how to add it
    from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler

    return StatefulBatchSampler(batch_sampler.sampler, batch_sampler.batch_size,
                                batch_sampler.drop_last)


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

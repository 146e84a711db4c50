"""``DataLoaderShard``: a real ``torch.utils.data.DataLoader`` that iterates one rank's shard.

It adds, at near-zero per-batch cost: batches moved to the target device, an epoch
counter forwarded to samplers and datasets (``set_epoch``), a one-batch look-ahead so
``end_of_dataloader`` is True while the last batch is processed (gradient accumulation
must sync on it), the exact count of real samples in a padded last batch (``remainder``,
for ``gather_for_metrics``), and a resumable position (``state_dict``; resuming skips
batches on indices, without reading the skipped samples, whenever the loader samples
indices).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from accel_state.operations import send_to_device
from accel_state.random import synchronize_rng_states
from torch.utils.data import DataLoader, IterableDataset

from accel_data.loader_state import _END, DataLoaderStateMixin
from accel_data.placement import async_safe, onto_cpu
from accel_data.samplers import SkipBatchSampler, get_sampler, keep_rng

__all__ = ["DataLoaderStateMixin", "DataLoaderShard", "UnsizedLoaderError", "carried_settings"]

# DataLoader settings a rebuilt loader carries over unchanged (those this torch accepts)
_CARRIED = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
            "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
            "pin_memory_device", "in_order")
_ACCEPTED = frozenset(inspect.signature(DataLoader.__init__).parameters)


def carried_settings(dataloader: DataLoader) -> dict[str, Any]:
    """The settings of ``dataloader`` a loader rebuilt around it keeps (workers, collate,
    pinning, ...): what ``prepare_data_loader`` and ``skip_first_batches`` both pass on."""
    return {key: getattr(dataloader, key) for key in _CARRIED
            if key in _ACCEPTED and hasattr(dataloader, key)}


class _ItselfAsBase:
    """``base_dataloader``: Accelerate's loaders wrap a ``DataLoader`` and expose it under
    this name; ours are the ``DataLoader`` themselves, so an instance answers with itself.
    Read on the class it raises ``AttributeError``, as Accelerate's instance attribute does."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(
                "base_dataloader is an attribute of a loader instance, not of its class; "
                "read it on a DataLoaderShard you built or prepared.")
        return obj


class DataLoaderShard(DataLoaderStateMixin, DataLoader):
    """A ``DataLoader`` over one rank's shard that moves each batch to ``device``.

    Built like any ``DataLoader`` (``dataset`` plus the usual keyword arguments, typically a
    ``BatchSamplerShard`` as ``batch_sampler`` or an ``IterableDatasetShard`` as
    ``dataset``); ``prepare_data_loader`` builds one from an existing loader. With
    ``device=None`` batches are left where the workers made them. ``rng_types`` (e.g.
    ``["generator"]``, ``["torch"]``) are synchronised from rank 0 at the start of every pass.

    Random numbers are drawn as Accelerate's loader draws them: each pass takes torch's
    worker base seed from the user's ``generator`` (else the global RNG) and the sampler
    draws as it would in Accelerate, so a seeded script sees the same batches and leaves
    the RNGs in the same state. A pass resumed from ``load_state_dict`` redraws the
    interrupted pass's permutation and consumes nothing (those draws were made before the
    checkpoint, whose RNG states are restored with it).
    """

    _is_accelerate_prepared = True
    #: the ``DataLoader`` doing the loading: this loader itself (see :class:`_ItselfAsBase`)
    base_dataloader = _ItselfAsBase()
    #: built on torchdata's ``StatefulDataLoader`` (True for :func:`stateful_class` variants)
    use_stateful_dataloader = False

    def __new__(cls, *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any) -> Any:
        """``use_stateful_dataloader=True`` (Accelerate's constructor argument) builds the
        class's torchdata-backed variant (see ``accel_data.stateful``)."""
        if use_stateful_dataloader and not cls.use_stateful_dataloader:
            from accel_data.stateful import stateful_class

            cls = stateful_class(cls)
        return super().__new__(cls)

    def __init__(self, dataset: Any, device: torch.device | str | None = None,
                 non_blocking: bool = False, rng_types: list[Any] | None = None,
                 synchronized_generator: torch.Generator | None = None,
                 loader_seed: int | None = None, **kwargs: Any) -> None:
        # ``loader_seed`` is accepted for older callers and unused: the loader draws its
        # worker base seed from the user's generator (else the global RNG), as Accelerate's.
        kwargs.pop("use_stateful_dataloader", None)  # chose the class in __new__
        super().__init__(dataset, **kwargs)
        self.device = torch.device(device) if device is not None else None
        self.non_blocking = bool(non_blocking)
        # "generator" needs a generator to synchronise; without one it is dropped (Accelerate)
        self.rng_types = [t for t in rng_types or () if synchronized_generator is not None
                          or getattr(t, "value", t) != "generator"] or None
        self.synchronized_generator = synchronized_generator
        self.iteration = 0
        self._drop_last_source = self._source_drop_last()
        shard = self._shard() or (self.dataset if hasattr(self.dataset, "num_processes")
                                  else None)
        self._pads = bool(getattr(shard, "even_batches", True)) if shard is not None else False

    def _source_drop_last(self) -> bool:
        """Whether the sharded source drops the incomplete end (then nothing is padded)."""
        source = self.batch_sampler if self.batch_sampler is not None else self.sampler
        for obj in (self.dataset, source):
            if hasattr(obj, "num_processes") and hasattr(obj, "drop_last"):
                return bool(obj.drop_last)
        return bool(getattr(source, "drop_last", self.drop_last))

    @property
    def even_batches(self) -> bool:
        """Whether the last batches are padded so that every rank takes the same number of
        steps. Settable between passes (``Accelerator.join_uneven_inputs(even_batches=...)``
        sets it for the block); an unsharded loader never pads."""
        return self._pads

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        shard = self._shard() or (self.dataset if hasattr(self.dataset, "num_processes")
                                  else None)
        if shard is not None:
            shard.even_batches = bool(value)
        self._pads = bool(value) and shard is not None

    def _shard(self) -> Any:
        """The ``BatchSamplerShard``/``IterableDatasetShard`` inside, or ``None``."""
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        for _ in range(32):
            if node is None or hasattr(node, "num_processes"):
                return node
            node = getattr(node, "batch_sampler", None)
        return None

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step across all ranks (``None`` when it cannot be known)."""
        shard = self._shard()
        if shard is None and hasattr(self.dataset, "total_batch_size"):
            shard = self.dataset
        if shard is not None:
            return shard.total_batch_size
        if self.batch_sampler is not None:
            return getattr(self.batch_sampler, "batch_size", None)
        return getattr(self.sampler, "batch_size", 1)  # batch_size=None: one item per step

    @property
    def total_dataset_length(self) -> int:
        """Length of the dataset before sharding (``TypeError`` if unsized)."""
        total = getattr(self.dataset, "total_length", None)
        return total if total is not None else len(self.dataset)

    def __len__(self) -> int:
        """Batches of the next pass (a pending skip of this epoch is subtracted)."""
        try:
            total = super().__len__()
        except TypeError as error:
            raise UnsizedLoaderError(
                f"len() of this prepared DataLoader is unknown: its dataset "
                f"{type(self.dataset).__name__} has no __len__ (an IterableDataset read on "
                "every rank, dispatch_batches=False). Give the dataset a __len__, or count "
                "steps yourself (e.g. max_steps) instead of len(dataloader).") from error
        return max(total - self._pending_skip(), 0)

    @property
    def _index_sampler(self) -> Any:  # DataLoader's hook: what its iterators draw indices from
        override = self.__dict__.get("_skip_sampler")
        if override is not None:
            return override
        return self.batch_sampler if self._auto_collation else self.sampler

    def get_sampler(self) -> Any:
        """The index sampler (see :func:`accel_data.get_sampler`)."""
        return get_sampler(self)

    def set_sampler(self, sampler: Any) -> None:
        """Replace the index sampler under the (sharded) batch sampler."""
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        while getattr(node, "batch_sampler", None) is not None:
            node = node.batch_sampler
        if not hasattr(node, "sampler"):
            raise ConfigurationError(
                f"Cannot replace the sampler of this loader: its {type(node).__name__} holds no "
                "`sampler` attribute; build a new DataLoader with the sampler instead.")
        node.sampler = sampler

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the next pass on the samplers and the dataset that take one."""
        self._pending_finish = None  # an explicit epoch overrides a pass left on its last batch
        self.iteration = epoch
        done: list[Any] = []
        node = self.batch_sampler if self.batch_sampler is not None else self.sampler
        targets = []
        for _ in range(32):
            targets.append(node)
            node = getattr(node, "batch_sampler", None)
            if node is None:
                break
        targets += [get_sampler(self), self.dataset]
        for obj in targets:
            if hasattr(obj, "set_epoch") and not any(obj is seen for seen in done):
                obj.set_epoch(epoch)
                done.append(obj)
        self._sync_start()

    def _open(self, skip: int) -> tuple[Iterator[Any], int]:
        """The torch iterator of this pass, and how many batches it still has to skip.

        Map-style loaders skip on indices: for this pass only, the index sampler is wrapped
        in a ``SkipBatchSampler`` (also in a persistent-workers iterator that is reused).
        A pass resumed by ``load_state_dict`` draws no random numbers: the interrupted
        pass drew them before the checkpoint (whose RNG states are restored with it).
        """
        resumed, self._resumed = self._resumed, False
        with keep_rng(self.generator) if resumed else nullcontext():
            return self._open_pass(skip)

    def _open_pass(self, skip: int) -> tuple[Iterator[Any], int]:
        if not skip or isinstance(self.dataset, IterableDataset):
            return super().__iter__(), skip
        base = self.batch_sampler if self._auto_collation else self.sampler
        wrapper = SkipBatchSampler(base, skip)
        self.__dict__["_skip_sampler"] = wrapper
        if self._iterator is not None:
            self._iterator._index_sampler = wrapper
        try:
            iterator = super().__iter__()
        finally:
            del self.__dict__["_skip_sampler"]
        iterator._index_sampler = base  # later passes of a persistent iterator skip nothing
        return iterator, 0

    def _exact_remainder(self) -> None:
        """At the end of a pass, read how many samples of the last global batch are real
        when it is short, padded or not (Accelerate's ``remainder``; 0: it is full)."""
        if self._drop_last_source:
            return
        shard = self._shard()
        if shard is None and isinstance(self.dataset, IterableDataset):
            if hasattr(self.dataset, "num_processes"):  # an IterableDatasetShard
                shard = self.dataset if self.num_workers == 0 else None  # else in a worker
            else:
                return  # one process over a stream: its length is not known
        real = getattr(shard, "padded_real", None)
        if real is not None:
            self.remainder = int(real)
        elif shard is None:  # one process: Accelerate's count from the lengths
            try:
                total, per_step = self.total_dataset_length, self.total_batch_size
            except TypeError:
                return
            if per_step:
                self.remainder = total % per_step

    def __iter__(self) -> Iterator[Any]:
        self._settle()  # a previous pass left on its last batch is over
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        self.set_epoch(self.iteration)
        skip = self._pending_skip()
        self.begin()
        self._yielded = skip or self.__dict__.pop("_resume_offset", 0)
        try:
            iterator, to_read = self._open(skip)
            for _ in range(to_read):  # iterable datasets: the skipped batches are read
                if next(iterator, _END) is _END:
                    break
        except BaseException:
            self.end()
            raise
        device, non_blocking = self.device, self.non_blocking or async_safe(self.device)
        move = None
        if device is not None and device.type == "cpu":
            move = onto_cpu
        elif device is not None:
            # Move before fetching the next batch, so an asynchronous copy overlaps it.
            def move(batch: Any) -> Any:
                return send_to_device(batch, device, non_blocking)
        yield from self._look_ahead(iterator, move, self._exact_remainder)


class UnsizedLoaderError(ConfigurationError, TypeError):
    """``len()`` of a prepared loader whose dataset has no length (also a ``TypeError``,
    which is what code probing ``len(dataloader)`` catches)."""

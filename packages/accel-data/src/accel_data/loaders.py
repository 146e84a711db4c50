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

from collections.abc import Callable, Iterator
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from accel_state.state import GradientState
from accel_state.operations import send_to_device
from accel_state.random import synchronize_rng_states
from torch.utils.data import DataLoader, IterableDataset

from accel_data.placement import async_safe, onto_cpu
from accel_data.samplers import SkipBatchSampler, draw_seed, get_sampler, pass_seed

__all__ = ["DataLoaderStateMixin", "DataLoaderShard", "UnsizedLoaderError"]


class DataLoaderStateMixin:
    """Iteration state of a prepared loader: what a training loop reads and a checkpoint saves.

    ``end_of_dataloader``/``remainder`` describe the current pass; ``begin()``/``end()``
    bracket every pass and are the single place where a loader reports itself to the
    process-wide ``GradientState``. ``state_dict()``/``load_state_dict()`` capture the
    position (epoch, batches yielded, shuffle seed) so a resumed run continues with
    exactly the batches the uninterrupted run would have seen.
    """

    end_of_dataloader: bool = False
    # Real samples in the last global batch when it was padded (what gather_for_metrics
    # keeps of it); 0 when nothing was padded; -1 when unknown.
    remainder: int = -1
    iteration: int = 0  # epoch of the next pass; advanced after each complete pass
    _yielded: int = 0  # batches of epoch `iteration` handed out (skipped ones included)
    _skip_plan: tuple[int, int] | None = None  # (epoch, batches) to skip in that epoch only
    # Set when a pass hands out its last batch: the epoch is done even if the pass is then
    # abandoned (``break`` on the last batch) or never resumed. Identifies that pass.
    _pending_finish: object | None = None

    def reset(self) -> None:
        """Forget the previous pass."""
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        """A pass starts: become the active dataloader, reset, estimate ``remainder``."""
        self.reset()
        GradientState()._add_dataloader(self)
        self.remainder = self._expected_remainder()

    def _expected_remainder(self) -> int:
        """``remainder`` from the lengths, before the pass tells the exact value."""
        if getattr(self, "_drop_last_source", False):
            return -1
        if not getattr(self, "_pads", True):
            return 0
        try:
            total = self.total_dataset_length  # type: ignore[attr-defined]
            per_step = self.total_batch_size  # type: ignore[attr-defined]
        except TypeError:  # unsized dataset
            return -1
        return total % per_step if per_step else -1

    def end(self) -> None:
        """A pass ended (exhausted or abandoned): the enclosing loader, if any, is active again."""
        GradientState()._remove_dataloader(self)

    # -- resumable position ----------------------------------------------------------------
    def _pending_skip(self) -> int:
        """Batches the next pass skips: only if it is the epoch the skip was asked for."""
        plan = self._skip_plan
        return plan[1] if plan is not None and plan[0] == self.iteration else 0

    def set_skip_batches(self, num_batches: int) -> None:
        """Make the next pass of the current epoch start after ``num_batches`` batches."""
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
            raise ConfigurationError(
                f"num_batches must be a non-negative int, got {num_batches!r}; pass how many "
                "batches of this epoch were already consumed.")
        self._skip_plan = (self.iteration, num_batches) if num_batches else None

    def state_dict(self) -> dict[str, Any]:
        """The position as plain ints: ``epoch``, ``batches_yielded``, and ``sampler_seed``
        (a seedable sampler's) or else ``loader_seed`` (the worker seeds' source).

        Taken mid-pass it is the batches handed out so far; taken on the last batch (or
        after it) it is the start of the next epoch.
        """
        epoch, done = self.iteration, self._yielded
        if self._skip_plan is not None and self._skip_plan[0] == epoch and not done:
            done = self._skip_plan[1]  # loaded but not iterated yet
        if self._pending_finish is not None:  # the last batch is out: the epoch is done
            epoch, done = epoch + 1, 0
        state: dict[str, Any] = {"epoch": epoch, "batches_yielded": done}
        seed = getattr(get_sampler(self), "initial_seed", None)  # type: ignore[arg-type]
        if isinstance(seed, int):
            state["sampler_seed"] = seed
        elif isinstance(getattr(self, "_loader_seed", None), int):
            state["loader_seed"] = self._loader_seed  # worker seeds of an unshuffled loader
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict``: the next pass resumes that epoch where it stopped."""
        try:
            epoch, done = int(state_dict["epoch"]), int(state_dict["batches_yielded"])
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigurationError(
                f"Not a dataloader state: {state_dict!r} lacks an int 'epoch' and "
                "'batches_yielded'; pass what this loader's state_dict() returned.") from error
        self.set_epoch(epoch)  # type: ignore[attr-defined]
        self._yielded = 0
        self._skip_plan = (epoch, done) if done else None
        seed = state_dict.get("sampler_seed")
        sampler = get_sampler(self)  # type: ignore[arg-type]
        if seed is not None and hasattr(sampler, "initial_seed"):
            sampler.initial_seed = int(seed)
        if state_dict.get("loader_seed") is not None:
            self._loader_seed = int(state_dict["loader_seed"])

    def _hand_out_last(self) -> object:
        """The last batch of this pass is about to be yielded: from now on the epoch is done."""
        token = object()
        self._pending_finish = token
        return token

    def _settle(self, token: object | None = None) -> None:
        """Count a pass whose last batch was handed out as finished (``token``: that pass
        only; ``None``: whichever is pending). Idempotent."""
        pending = self._pending_finish
        if pending is not None and (token is None or pending is token):
            self._finish_pass()

    def _look_ahead(self, batches: Iterator[Any], move: Callable[[Any], Any] | None,
                    before_last: Callable[[], None]) -> Iterator[Any]:
        """Yield ``batches`` one behind, so the last is known as such when it is handed out
        (``end_of_dataloader``); ``move`` (device placement) runs on each batch before the
        next one is fetched; ``before_last`` runs just before the last one is yielded. Ends
        the pass, and the state ``begin()`` opened, however the iteration stops."""
        token = None
        # the count goes straight into the instance dict: DataLoader's Python __setattr__
        # (which guards its own options) cost ~1 us per batch here
        attributes = self.__dict__
        attributes["_yielded"] = self._yielded
        try:
            current = next(batches, _END)
            if current is _END:
                self._finish_pass()
                return
            if move is not None:
                current = move(current)
            for upcoming in batches:
                attributes["_yielded"] += 1
                yield current
                current = upcoming if move is None else move(upcoming)
            before_last()
            self.end_of_dataloader = True
            self._yielded += 1
            token = self._hand_out_last()
            yield current
        finally:
            if token is not None:  # also when abandoned on the last batch
                self._settle(token)
            self.end()

    def _finish_pass(self) -> None:
        """A pass ran to its end: the next one is the next epoch, from its start."""
        self._pending_finish = None
        self.iteration += 1
        self._yielded = 0
        self._skip_plan = None
        origin = getattr(self, "_origin", None)
        if origin is not None:  # a skip_first_batches copy finished the origin's epoch
            origin.iteration, origin._yielded = self.iteration, 0


class DataLoaderShard(DataLoaderStateMixin, DataLoader):
    """A ``DataLoader`` over one rank's shard that moves each batch to ``device``.

    Built like any ``DataLoader`` (``dataset`` plus the usual keyword arguments, typically a
    ``BatchSamplerShard`` as ``batch_sampler`` or an ``IterableDatasetShard`` as
    ``dataset``); ``prepare_data_loader`` builds one from an existing loader. With
    ``device=None`` batches are left where the workers made them. ``rng_types`` (e.g.
    ``["generator"]``, ``["torch"]``) are synchronised from rank 0 at the start of every pass.

    Iterating never touches the global torch RNG: the loader has its own ``generator``
    (the user's is not advanced), re-seeded at the start of every pass from the index
    sampler's seed (a ``SeedableRandomSampler``), else from a seed fixed at construction
    (the user's generator's seed, else one draw from the global RNG), and the epoch. So
    the worker base seed torch draws per iterator differs per epoch, and a resumed run
    draws exactly what the uninterrupted one did.
    """

    _is_accelerate_prepared = True
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
        kwargs.pop("use_stateful_dataloader", None)  # chose the class in __new__
        user_generator = kwargs.get("generator")
        super().__init__(dataset, **kwargs)
        self.generator = torch.Generator()
        self._loader_seed = None if loader_seed is None else int(loader_seed)
        if self._loader_seed is None and not isinstance(self._sampler_seed(), int):
            self._loader_seed = (user_generator.initial_seed() if user_generator is not None
                                 else draw_seed())
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

    def _sampler_seed(self) -> int | None:
        seed = getattr(get_sampler(self), "initial_seed", None)
        return seed if isinstance(seed, int) else None

    def _seed_pass(self) -> None:
        """Re-seed the loader's own generator for the epoch this pass iterates: from the
        sampler's seed when it has one, else from ``loader_seed``."""
        seed = self._sampler_seed()
        if seed is None:
            if self._loader_seed is None:  # the seedable sampler was replaced meanwhile
                self._loader_seed = draw_seed()
            seed = self._loader_seed
        self.generator.manual_seed(pass_seed(seed, self.iteration))

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

    def _open(self, skip: int) -> tuple[Iterator[Any], int]:
        """The torch iterator of this pass, and how many batches it still has to skip.

        Map-style loaders skip on indices: for this pass only, the index sampler is wrapped
        in a ``SkipBatchSampler`` (also in a persistent-workers iterator that is reused).
        """
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
        """At the end of a pass, read how many samples of the last global batch are real."""
        if not self._pads or self._drop_last_source:
            return
        shard = self._shard()
        if shard is None and isinstance(self.dataset, IterableDataset):
            shard = self.dataset if self.num_workers == 0 else None  # else it ran in a worker
        real = getattr(shard, "padded_real", None)
        if real is not None:
            self.remainder = int(real)

    def __iter__(self) -> Iterator[Any]:
        self._settle()  # a previous pass left on its last batch is over
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        self.set_epoch(self.iteration)
        self._seed_pass()
        skip = self._pending_skip()
        self.begin()
        self._yielded = skip
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


_END = object()

"""``DataLoaderDispatcher``: rank 0 reads the data, every rank receives its own part.

For data that cannot be sharded by index on every rank (a stream that only one process
should open, a dataset whose reads are expensive or not reproducible). Each step rank 0
forms one *global batch* — ``num_processes`` batches of the loader, or one batch cut in
``num_processes`` slices with ``split_batches`` — and sends it in two parts: the
structure (nesting, shapes, dtypes, non-tensor leaves) with ``broadcast_object_list``,
then the tensors packed into one flat buffer per dtype. So batches may change shape from
step to step (variable sequence lengths), and a step costs ``1 + number of dtypes``
collectives whatever the nesting (plus one empty message that ends each epoch). Rank 0
reads no further ahead than an undispatched loader: one batch. With a data-parallel
``group`` the reader is the group's rank 0 and the batches go to the group's processes
only: every group reads and sends its own copy of the data.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from accel_state.groups import source_rank
from accel_state.operations import broadcast_object_list
from accel_state.structures import recursively_apply, send_to_device
from torch.utils.data import IterableDataset

from accel_data.batches import batch_len as _batch_len
from accel_data.batches import final_cut, final_rows, slice_batch
from accel_data.groups import resolve_world
from accel_data.loader_state import _END
from accel_data.loaders import DataLoaderShard, UnsizedLoaderError
from accel_data.samplers import SkipBatchSampler, keep_rng
from accel_data.shard_checks import check_split

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["DataLoaderDispatcher", "slice_batch"]


class _Slot:
    """Stands for one tensor in a broadcast structure: its position in the layout."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __getstate__(self) -> int:
        return self.index

    def __setstate__(self, state: int) -> None:
        self.index = state


@dataclass
class _Step:
    """What rank 0 broadcasts before the tensors of one global batch."""

    skeletons: list[Any]  # one per rank: the part with tensors replaced by _Slot (None: no part)
    layout: list[tuple[torch.dtype, tuple[int, ...]]]  # dtype and shape of every tensor
    remainder: int  # real samples of this global batch when it was padded, else 0 (-1 unknown)


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.uint8 if dtype == torch.bool else dtype  # not every backend sends bool


class DataLoaderDispatcher(DataLoaderShard):
    """A prepared loader whose data is read on rank 0 only and sent to every rank.

    Built like ``DataLoaderShard`` from the *original* loader's arguments: every rank
    holds the same DataLoader, only rank 0 iterates it. ``split_batches=False``: each rank
    gets one whole batch of the loader per step; ``True``: each batch is cut in
    ``num_processes`` slices (``slice_fn(batch, start, stop)``, default
    :func:`slice_batch`). With ``even_batches`` a short final step is completed with the
    epoch's first parts (``remainder`` counts the real samples); without it, ranks with
    no data in the final step stop one batch earlier. In both modes the parts of the
    final step may differ in size (they are not re-cut). ``group``: the data-parallel
    process group (``num_processes``/``process_index`` are then its size and rank); its
    rank 0 reads, and every exchange stays within it.
    """

    def __init__(self, dataset: Any, split_batches: bool = False, skip_batches: int = 0, *,
                 even_batches: bool = True, slice_fn: Callable[..., Any] | None = None,
                 num_processes: int | None = None, process_index: int | None = None,
                 group: ProcessGroup | None = None, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.num_processes, self.process_index = resolve_world(
            num_processes, process_index, group, "DataLoaderDispatcher")
        self.group = group
        self._source = source_rank(0, group)  # global rank of the reader, torch's `src`
        self.split_batches = bool(split_batches)
        self.even_batches = bool(even_batches)
        self.slice_fn = slice_fn or slice_batch
        if self.split_batches:
            check_split(self._loader_batch_size, self.num_processes, "DataLoaderDispatcher")
        if skip_batches:
            self.set_skip_batches(skip_batches)

    @property
    def even_batches(self) -> bool:
        """Whether a short final step is completed with the epoch's first parts (settable
        between passes, as ``Accelerator.join_uneven_inputs(even_batches=...)`` does)."""
        return self._pads

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self._pads = bool(value)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def _loader_batch_size(self) -> int | None:
        """Batch size of the wrapped loader (also when it was built from a batch_sampler)."""
        if self.batch_size is not None:
            return self.batch_size
        return getattr(self.batch_sampler, "batch_size", None)

    @property
    def total_batch_size(self) -> int:
        size = self._loader_batch_size or 1
        return size if self.split_batches else size * self.num_processes

    def _steps_per_epoch(self, base: int) -> tuple[int, bool]:
        """Steps for ``base`` loader batches, and whether this rank lacks a final part
        (only without ``even_batches``, where the final step is cut as :func:`final_cut`
        says and the processes past its real rows get nothing)."""
        num, rank = self.num_processes, self.process_index
        if self.split_batches:
            steps = base
        elif self._drop_last_source:
            return base // num, False
        else:
            steps = -(-base // num)
        if self.even_batches or not base:
            return steps, False
        size = self._loader_batch_size
        try:
            source = self.dataset if isinstance(self.dataset, IterableDataset) \
                else self.batch_sampler.sampler  # type: ignore[union-attr]
            total = len(source)  # type: ignore[arg-type]
        except (AttributeError, TypeError):
            total = None
        if size is None or total is None or self._pending_start():
            return steps, not self.split_batches and rank >= (base % num or num)
        rows = final_rows(total, size, base, num, self.split_batches)
        full = size if self.split_batches else size * num
        return steps, rows < full and rank * -(-rows // num) >= rows

    def __len__(self) -> int:
        try:
            base = super(DataLoaderShard, self).__len__()
        except TypeError as error:
            raise UnsizedLoaderError(
                f"len() of this dispatched DataLoader is unknown: its dataset "
                f"{type(self.dataset).__name__} has no __len__. Give it a __len__, or count "
                "steps yourself (e.g. max_steps) instead of len(dataloader).") from error
        start = self._pending_start()  # a mid-round resume: see accel_data.reshard
        steps, short = self._steps_per_epoch(max(base - start, 0))
        return max(steps - short - self._pending_skip(), 0)

    # -- rank 0: reading -----------------------------------------------------------------------
    def _open_base(self, skip: int) -> tuple[Iterator[Any], int]:
        """Rank 0's batches and how many global batches to read and drop first (the
        first global batch is always read: it is the padding source of the epoch's end).

        A resumed pass continues after ``skip`` steps plus the pending start (batches of a
        mid-round position saved by another number of processes). Map-style loaders skip
        on indices; iterable datasets read the skipped batches.
        """
        per_step = 1 if self.split_batches else self.num_processes
        consumed = self._pending_start() + skip * per_step
        if not consumed:
            return super(DataLoaderShard, self).__iter__(), 0
        if consumed > per_step and not isinstance(self.dataset, IterableDataset):
            base = self.batch_sampler if self._auto_collation else self.sampler
            self.__dict__["_skip_sampler"] = SkipBatchSampler(base, consumed - per_step,
                                                              per_step)
            try:
                iterator = super(DataLoaderShard, self).__iter__()
            finally:
                del self.__dict__["_skip_sampler"]
            iterator._index_sampler = base
            return iterator, 1
        batches = super(DataLoaderShard, self).__iter__()
        head = list(itertools.islice(batches, per_step))
        if consumed < per_step:  # the rest of the first round: already read as the head
            return itertools.chain(head, head[consumed:], batches), 1
        for _ in itertools.islice(batches, consumed - per_step):
            pass  # read and dropped
        return itertools.chain(head, batches), 1

    def _global_batches(self, iterator: Iterator[Any]) -> Iterator[list[Any]]:
        """Rank 0: each step's parts, one per rank (``None`` where the data ran out)."""
        num = self.num_processes
        while True:
            if self.split_batches:
                batch = next(iterator, _END)
                if batch is _END:
                    return
                width = self._loader_batch_size // num  # type: ignore[operator]
                size = _batch_len(batch)
                yield [self.slice_fn(batch, r * width, min((r + 1) * width, size))
                       if r * width < size else None for r in range(num)]
                continue
            parts = list(itertools.islice((b for b in iterator), num))
            if not parts or (len(parts) < num and self._drop_last_source):
                return
            yield parts + [None] * (num - len(parts))

    def _plan(self, skip: int) -> Iterator[tuple[list[Any], int]]:
        """Rank 0: ``(parts, remainder)`` per step, the final one completed if even.

        A step is sent as soon as it is read, without reading the next one: the sampler
        is exhausted (and a ``SeedableRandomSampler`` moves to its next epoch) only when
        the last batch is handed out, as with an undispatched loader. Only the final step
        can lack parts, so padding needs no look-ahead; the end travels as its own message.
        """
        resumed, self._resumed = self._resumed, False  # see DataLoaderShard._open
        with keep_rng(self.generator) if resumed else nullcontext():
            iterator, discard = self._open_base(skip)
        stream = self._global_batches(iterator)
        first = next(stream, None)
        if first is None:
            return
        head = [p for p in first if p is not None]
        stream = itertools.chain([first], stream)
        for _ in range(discard):
            next(stream, None)
        full = self.total_batch_size if self._loader_batch_size else None
        for current in stream:
            remainder = -1 if self._drop_last_source else 0
            rows = sum(_batch_len(p) for p in current if p is not None)
            cut = None
            if full is not None and rows < full and remainder == 0:  # the final step
                cut = final_cut(current, head, self.num_processes, self.even_batches,
                                self.slice_fn)
            if cut is not None:
                current, remainder = cut
            elif self.even_batches and any(p is None for p in current):  # cannot re-cut
                remainder = rows
                missing = [r for r, p in enumerate(current) if p is None]
                for offset, r in enumerate(missing):
                    current[r] = head[offset % len(head)]
            yield current, remainder

    # -- every rank: the exchange ------------------------------------------------------------------
    def _wire_device(self) -> torch.device:
        if dist.get_backend(self.group) == "gloo":
            return torch.device("cpu")
        if self.device is not None and self.device.type != "cpu":
            return self.device
        return torch.device("cuda", torch.cuda.current_device())

    def _send(self, parts: list[Any], remainder: int) -> list[Any]:
        """Rank 0: broadcast one step; returns its own part."""
        if self.num_processes == 1:  # nobody to send to (and maybe no process group at all)
            return parts[0]
        tensors: list[torch.Tensor] = []

        def slot(tensor: torch.Tensor) -> _Slot:
            tensors.append(tensor)
            return _Slot(len(tensors) - 1)

        skeletons = [None if p is None else recursively_apply(slot, p) for p in parts]
        layout = [(t.dtype, tuple(t.shape)) for t in tensors]
        broadcast_object_list([_Step(skeletons, layout, remainder)], from_process=0,
                              group=self.group)
        device = self._wire_device()
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            flat = [t.reshape(-1) for t in tensors if t.dtype == dtype]
            buffer = torch.cat(flat).to(device).view(_wire_dtype(dtype))
            if buffer.numel():
                dist.broadcast(buffer, src=self._source, group=self.group)
        return parts[0]

    def _receive(self) -> tuple[Any, _Step | None]:
        """Other ranks: one step's meta and this rank's part (``None`` if it has none)."""
        box: list[Any] = [None]
        broadcast_object_list(box, from_process=0, group=self.group)
        step = box[0]
        if step is None:
            return None, None
        device = self._wire_device()
        views: dict[int, torch.Tensor] = {}
        for dtype in dict.fromkeys(dtype for dtype, _ in step.layout):
            members = [(i, shape) for i, (d, shape) in enumerate(step.layout) if d == dtype]
            sizes = [int(torch.Size(shape).numel()) for _, shape in members]
            buffer = torch.empty(sum(sizes), dtype=_wire_dtype(dtype), device=device)
            if buffer.numel():
                dist.broadcast(buffer, src=self._source, group=self.group)
            buffer = buffer.view(dtype)
            for (index, shape), chunk in zip(members, buffer.split(sizes), strict=True):
                views[index] = chunk.view(shape)
        skeleton = step.skeletons[self.process_index]
        if skeleton is None:
            return None, step
        part = recursively_apply(lambda s: views[s.index], skeleton,
                                 test_type=lambda x: isinstance(x, _Slot))
        if self.device is None and device.type != "cpu":
            part = send_to_device(part, "cpu")
        return part, step

    def _steps(self, skip: int) -> Iterator[tuple[Any, int]]:
        """Every rank, in lockstep: ``(my part or None, remainder)`` per step; rank 0 ends
        the epoch with an empty message (``None``)."""
        if self.process_index == 0:
            for parts, remainder in self._plan(skip):
                yield self._send(parts, remainder), remainder
            if self.num_processes > 1:
                broadcast_object_list([None], from_process=0, group=self.group)
            return
        resumed, self._resumed = self._resumed, False
        if not resumed:  # Accelerate opens (and never reads) the loader here too: that
            # draws torch's base seed from the global RNG, which the other ranks mirror
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        while True:
            part, step = self._receive()
            if step is None:
                return
            yield part, step.remainder

    def __iter__(self) -> Iterator[Any]:
        self._settle()  # a previous pass left on its last batch is over
        self.set_epoch(self.iteration)
        skip = self._pending_skip()
        self.begin()
        self._yielded = skip
        final = [self.remainder]

        def mine() -> Iterator[Any]:
            for part, remainder in self._steps(skip):
                final[0] = remainder  # the final step's counts when the pass ends
                if part is not None:
                    yield part if self.device is None else send_to_device(
                        part, self.device, self.non_blocking)

        def exact_remainder() -> None:
            self.remainder = final[0]

        yield from self._look_ahead(mine(), None, exact_remainder)

"""Rows of collated batches: slice, count and join them, and cut a dispatched epoch's
final step the way Accelerate does.

Accelerate's dispatcher cuts the final, short global batch of an epoch into equal parts,
one per process, after completing it with the epoch's first rows when its size is not a
multiple of the number of processes; ``gather_for_metrics`` then keeps its real rows. A
script that gathers one value per row (or a per-batch loss repeated ``batch_size`` times,
as transformers' Trainer does) only gets Accelerate's numbers if the parts are the same,
so accel's dispatcher cuts the final step in exactly that way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from accel_state.operations import ignorant_find_batch_size
from accel_state.structures import honor_type, is_namedtuple

__all__ = ["batch_len", "final_cut", "join_batches", "slice_batch"]


def _is_leaf(value: Any) -> bool:
    return not isinstance(value, (list, tuple, Mapping, torch.Tensor))


def _rows_list(batch: Any) -> bool:
    """A list of plain objects (e.g. strings): rows, not a structure."""
    return (isinstance(batch, (list, tuple)) and bool(batch) and not is_namedtuple(batch)
            and all(_is_leaf(item) for item in batch))


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a collated batch: tensors along dim 0, lists of plain objects
    (e.g. strings) as lists; dicts, tuples and namedtuples keep their type (a namedtuple is
    a record, never rows: its plain fields stay as they are)."""
    if isinstance(batch, torch.Tensor):
        return batch[start:stop]
    if isinstance(batch, Mapping):
        return type(batch)({k: slice_batch(v, start, stop) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        if _rows_list(batch):
            return batch[start:stop]
        return honor_type(batch, (slice_batch(item, start, stop) for item in batch))
    return batch


def batch_len(batch: Any) -> int:
    """Rows of a collated batch (first tensor's dim 0, else a list of plain objects, else 1)."""
    size = ignorant_find_batch_size(batch)
    if size is not None:
        return int(size)
    if _rows_list(batch):
        return len(batch)
    if isinstance(batch, Mapping):
        return next((batch_len(v) for v in batch.values()), 1)
    return 1


def join_batches(pieces: Sequence[Any]) -> Any:
    """The rows of ``pieces`` (batches of one structure) as one batch, in order: the inverse
    of :func:`slice_batch`. Raises ``ValueError`` where they cannot be joined (tensors
    whose other dimensions differ, structures that differ, plain fields that differ)."""
    first = pieces[0]
    if isinstance(first, torch.Tensor):
        try:
            return torch.cat([p if p.ndim else p[None] for p in pieces])
        except (RuntimeError, TypeError, AttributeError) as error:
            raise ValueError(f"tensors of shapes {[tuple(p.shape) for p in pieces]} "
                             "cannot be joined along dim 0") from error
    if isinstance(first, Mapping):
        if any(not isinstance(p, Mapping) or p.keys() != first.keys() for p in pieces):
            raise ValueError("batches with different keys cannot be joined")
        return type(first)({k: join_batches([p[k] for p in pieces]) for k in first})
    if _rows_list(first) and all(_rows_list(p) or p == [] for p in pieces):
        return honor_type(first, (item for p in pieces for item in p))
    if isinstance(first, (list, tuple)):
        if any(not isinstance(p, (list, tuple)) or len(p) != len(first) for p in pieces):
            raise ValueError("batches of different lengths of fields cannot be joined")
        return honor_type(first, (join_batches([p[i] for p in pieces])
                                  for i in range(len(first))))
    if any(p != first for p in pieces):
        raise ValueError(f"plain fields {pieces!r} differ and cannot be joined")
    return first


def final_cut(parts: list[Any], head: list[Any], num: int, even: bool,
              slice_fn: Callable[..., Any]) -> tuple[list[Any], int] | None:
    """The final step's parts cut as Accelerate cuts them, and its real rows.

    ``parts``: the step as read (``None`` where the data ran out); ``head``: the parts of
    the epoch's first step, the padding source. With ``even`` the ``R`` real rows are
    completed with the epoch's first rows (cycled) up to ``num * w`` rows, ``w = R // num``
    plus one when ``num`` does not divide ``R``, and process ``r`` takes rows
    ``r*w:(r+1)*w``; without it nothing is added, parts are ``ceil(R / num)`` rows and a
    process past the real rows gets ``None``. ``None`` when the rows cannot be joined
    (e.g. sequences padded to another length per batch): the caller keeps the parts.
    """
    pieces = [p for p in parts if p is not None]
    rows = sum(batch_len(p) for p in pieces)
    if not rows:
        return None
    width = -(-rows // num)
    padding = width * num - rows if even else 0
    try:
        if padding:
            source = join_batches(head)
            available = batch_len(source)
            while padding > 0:
                take = min(padding, available)
                pieces.append(slice_batch(source, 0, take))
                padding -= take
        joined = join_batches(pieces)
    except ValueError:
        return None
    total = batch_len(joined)
    return [slice_fn(joined, r * width, min((r + 1) * width, total)) if r * width < total
            else None for r in range(num)], rows


def final_rows(total: int, batch_size: int, batches: int, num: int, split: bool) -> int:
    """Rows of a dispatched epoch's final step, from the sizes: ``total`` samples in
    ``batches`` batches of ``batch_size`` (the last one possibly short)."""
    last = total - (batches - 1) * batch_size
    if split:
        return last
    in_round = batches % num or num
    return (in_round - 1) * batch_size + last

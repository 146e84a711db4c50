"""Ulysses data and loss: each rank of an ``sp`` group keeps its shard of the sequence.

The prepared loader gives every rank of one ``sp`` group the same batch (it shards over the
data-parallel dimensions only); the loader's ``collate_fn`` is wrapped so that each collated
batch is then cut to this rank's part of the sequence. Batches are dicts (what transformers'
collators return): ``position_ids`` are added from the global positions when absent (so
rotary angles match the whole sequence), ``shift_labels`` from ``labels`` (shifted over the
whole sequence, then cut: a shard's last token predicts the next shard's first), and every
tensor whose second dimension is the sequence length is cut. The sequence length is that of
``input_ids``; it must divide by ``sp_size``.

Loss: each rank sees only its tokens, and with ``-100`` labels the shards count different
numbers of them. :func:`sequence_parallel_mean` turns this rank's summed token loss into the
mean over the whole sequence, the same value on every rank, whose gradients (averaged over
the ``sp`` ranks by FSDP2, as every data-parallel gradient is) equal those of the
unsharded run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from accel_state import ConfigurationError

__all__ = ["shard_batch", "SequenceShardCollate", "shard_loader", "sequence_parallel_mean"]


def _positions(input_ids: torch.Tensor) -> torch.Tensor:
    batch, seq = input_ids.shape[:2]
    return torch.arange(seq, device=input_ids.device).expand(batch, seq).clone()


def _shift(labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)


def shard_batch(batch: Any, sp_rank: int, sp_size: int,
                fixed_length: int | None = None) -> dict[str, Any]:
    """This rank's part of ``batch`` (a dict with ``input_ids``), as described above;
    ``fixed_length``: the length every batch must have (``sp_seq_length`` with
    ``sp_seq_length_is_variable=False``)."""
    if not isinstance(batch, Mapping) or not isinstance(batch.get("input_ids"), torch.Tensor):
        kind = type(batch).__name__ if not isinstance(batch, Mapping) else \
            f"dict with keys {sorted(batch)}"
        raise ConfigurationError(
            f"Ulysses sequence parallelism shards dict batches with an 'input_ids' tensor "
            f"(batch, seq), but the loader gave a {kind}: return a dict such as "
            "{'input_ids': ..., 'labels': ..., 'position_ids': ...} from the collate_fn.")
    ids = batch["input_ids"]
    seq = ids.shape[1]
    if fixed_length is not None and seq != fixed_length:
        raise ConfigurationError(
            f"DeepSpeedSequenceParallelConfig(sp_seq_length={fixed_length}, "
            f"sp_seq_length_is_variable=False) expects every batch to be {fixed_length} tokens "
            f"long, but this one has {seq}: pad batches to {fixed_length} (a collator's "
            "max_length / padding='max_length'), or set sp_seq_length_is_variable=True.")
    if seq % sp_size:
        raise ConfigurationError(
            f"Ulysses sequence parallelism cuts each sequence into sp_size={sp_size} equal "
            f"shards, and this batch's sequence length {seq} does not divide by {sp_size}: pad "
            f"batches to a multiple of {sp_size} (a collator's pad_to_multiple_of={sp_size}).")
    full = dict(batch)
    if full.get("position_ids") is None:
        full["position_ids"] = _positions(ids)
    if isinstance(full.get("labels"), torch.Tensor) and "shift_labels" not in full:
        full["shift_labels"] = _shift(full["labels"])
    chunk = seq // sp_size
    cut = slice(chunk * sp_rank, chunk * (sp_rank + 1))
    return {key: value[:, cut] if isinstance(value, torch.Tensor) and value.dim() >= 2
            and value.shape[1] == seq else value for key, value in full.items()}


class SequenceShardCollate:
    """A loader's ``collate_fn`` followed by :func:`shard_batch` (picklable for workers)."""

    def __init__(self, collate_fn: Callable[[Any], Any], sp_rank: int, sp_size: int,
                 fixed_length: int | None = None) -> None:
        self.collate_fn = collate_fn
        self.sp_rank = sp_rank
        self.sp_size = sp_size
        self.fixed_length = fixed_length

    def __call__(self, samples: Any) -> dict[str, Any]:
        return shard_batch(self.collate_fn(samples), self.sp_rank, self.sp_size,
                           self.fixed_length)


def shard_loader(dataloader: Any, sp_rank: int, sp_size: int,
                 fixed_length: int | None = None) -> Any:
    """A shallow copy of ``dataloader`` whose batches are this rank's sequence shards (the
    user's loader is left as it is). Anything but a torch ``DataLoader`` is returned as it
    is (the facade refuses it later with its own message)."""
    if sp_size <= 1 or not isinstance(dataloader, torch.utils.data.DataLoader):
        return dataloader
    if isinstance(dataloader.collate_fn, SequenceShardCollate):
        return dataloader
    copied = copy.copy(dataloader)
    copied.collate_fn = SequenceShardCollate(dataloader.collate_fn, sp_rank, sp_size,
                                             fixed_length)
    return copied


def sequence_parallel_mean(loss_sum: torch.Tensor, num_tokens: torch.Tensor | int,
                           group: Any = None) -> torch.Tensor:
    """The mean token loss over the whole sequences of one ``sp`` group, from this rank's
    summed token loss ``loss_sum`` over its ``num_tokens`` counted tokens (``labels !=
    -100``): ``sum over ranks of loss_sum / sum over ranks of num_tokens``, the same value on
    every rank of ``group`` (``accelerator.torch_device_mesh["sp"].get_group()``; None: no
    sequence parallelism, the plain mean). Its gradient is that of ``sp_size * loss_sum /
    total tokens``: every rank's backward also reaches the other ranks' activations through
    the exchange, so the gradients summed over the ``sp`` ranks are those of ``sp_size``
    times the mean, and the average FSDP2 takes over them is the unsharded mean's. A group
    counting no token gives 0, not nan."""
    count = torch.as_tensor(num_tokens, dtype=torch.float32, device=loss_sum.device)
    if group is None or dist.get_world_size(group) == 1:
        return loss_sum / count.clamp(min=1)
    size = dist.get_world_size(group)
    total = count.detach().clone()
    dist.all_reduce(total, group=group)
    total = total.clamp(min=1)
    value = loss_sum.detach().clone()
    dist.all_reduce(value, group=group)
    share = loss_sum * size / total
    return share + (value / total - share).detach()

"""Ulysses sequence parallelism, torch-native: an all-to-all around core attention.

Every rank of an ``sp`` group holds one shard of each sequence (``seq / sp`` tokens, all
heads). Around the core attention, one all-to-all trades that split for a split over heads
(the whole sequence, ``heads / sp`` heads), the ordinary attention runs on it, and the inverse
all-to-all brings the output back to the sequence shard. Everything else in the model (norms,
MLPs, projections, rotary embeddings at global ``position_ids``) runs on the shard as is.

The exchange is a differentiable ``torch.distributed.all_to_all_single`` (its backward is the
inverse exchange), so it runs on every backend that has all-to-all, gloo on CPU included.

Which modules are core attention is named, never guessed: module-name patterns (``*`` for
one name component, as in a TP plan) from ``DeepSpeedSequenceParallelConfig(
sp_attention_modules=...)`` or the model's ``_sp_plan``; a transformers model without either
goes through its attention interface (:mod:`accel_parallel.mesh.ulysses_hf`;
``accel_parallel.mesh.sequence_parallel.apply_ulysses`` chooses). A core module is
called as ``core(q, k, v, *args, **kwargs)`` with ``(batch, heads, seq, head_dim)`` tensors
and returns the output in that layout.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from accel_state import ConfigurationError

__all__ = ["all_to_all", "seq_to_heads", "heads_to_seq", "repeat_kv_heads", "UlyssesForward",
           "core_attention_modules", "attention_patterns"]


def _exchange(x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``x`` into ``sp`` chunks along ``scatter_dim``, send chunk ``j`` to rank ``j``
    and concatenate what every rank sent along ``gather_dim`` (in rank order)."""
    size = dist.get_world_size(group)
    send = torch.stack(x.chunk(size, dim=scatter_dim)).contiguous()
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(received.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """The exchange, with the inverse exchange of the gradient in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, scatter_dim: int,
                gather_dim: int) -> torch.Tensor:
        ctx.group, ctx.dims = group, (scatter_dim, gather_dim)
        return _exchange(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        scatter_dim, gather_dim = ctx.dims
        return _exchange(grad.contiguous(), ctx.group, gather_dim, scatter_dim), None, None, None


def all_to_all(x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Differentiable all-to-all over ``group``: ``x``'s ``scatter_dim`` is split over the
    ranks and their pieces are joined along ``gather_dim``. ``x.shape[scatter_dim]`` must
    divide by the group's size (an error naming both otherwise)."""
    size = dist.get_world_size(group)
    if x.shape[scatter_dim] % size:
        raise ConfigurationError(
            f"Ulysses sequence parallelism splits dimension {scatter_dim} of a tensor of shape "
            f"{tuple(x.shape)} over sp_size={size} processes, and {x.shape[scatter_dim]} does not "
            f"divide by {size}: use an sp_size that divides the attention head count (and the "
            "sequence length).")
    if size == 1:
        return x
    return _AllToAll.apply(x, group, scatter_dim, gather_dim)


def seq_to_heads(x: torch.Tensor, group: Any, head_dim: int = 1, seq_dim: int = 2
                 ) -> torch.Tensor:
    """``(batch, heads, seq/sp, d)`` -> ``(batch, heads/sp, seq, d)``: the whole sequence of
    this rank's share of the heads."""
    return all_to_all(x, group, scatter_dim=head_dim, gather_dim=seq_dim)


def heads_to_seq(x: torch.Tensor, group: Any, head_dim: int = 1, seq_dim: int = 2
                 ) -> torch.Tensor:
    """The inverse of :func:`seq_to_heads`: ``(batch, heads/sp, seq, d)`` -> ``(batch, heads,
    seq/sp, d)``."""
    return all_to_all(x, group, scatter_dim=seq_dim, gather_dim=head_dim)


def repeat_kv_heads(k: torch.Tensor, q_heads: int, sp_size: int, head_dim: int = 1
                    ) -> torch.Tensor:
    """Key/value heads ready for the exchange: grouped heads (``kv < q`` heads) that do not
    divide over ``sp_size`` are repeated until they do (each rank then gets the key/value
    heads its query heads use). Counts that divide neither way are an error."""
    kv_heads = k.shape[head_dim]
    if kv_heads % sp_size == 0:
        return k
    if q_heads % kv_heads or sp_size % kv_heads:
        raise ConfigurationError(
            f"Ulysses sequence parallelism over sp_size={sp_size} cannot split {kv_heads} key/"
            f"value heads for {q_heads} query heads: the key/value head count must divide by "
            f"sp_size, or divide sp_size (and the query head count). Use such an sp_size.")
    return k.repeat_interleave(sp_size // kv_heads, dim=head_dim)


class UlyssesForward:
    """A core-attention module's forward with the Ulysses exchange around it.

    It replaces the module's ``forward`` in place (parameter and module names do not
    change, so optimizers, plans and checkpoints are unaffected). The first three arguments
    are ``q, k, v`` laid out ``(batch, heads, seq_shard, head_dim)``; the rest go through.
    """

    def __init__(self, forward: Callable[..., Any], group: Any) -> None:
        self.forward = forward
        self.group = group
        functools.update_wrapper(self, forward)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
        size = dist.get_world_size(self.group)
        q_heads = q.shape[1]
        if q_heads % size:
            raise ConfigurationError(
                f"Ulysses sequence parallelism splits the {q_heads} attention heads over "
                f"sp_size={size} processes, and {q_heads} does not divide by {size}: use an "
                "sp_size that divides the head count.")
        k, v = repeat_kv_heads(k, q_heads, size), repeat_kv_heads(v, q_heads, size)
        q, k, v = (seq_to_heads(t, self.group) for t in (q, k, v))
        return heads_to_seq(self.forward(q, k, v, *args, **kwargs), self.group)


def _pattern(key: str) -> re.Pattern[str]:
    parts = [r"[^.]+" if part == "*" else re.escape(part) for part in key.split(".")]
    return re.compile(r"\.".join(parts))


def core_attention_modules(model: torch.nn.Module, patterns: Sequence[str]
                           ) -> list[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of every module whose name matches one of ``patterns``; a pattern
    matching nothing is an error naming it and a few of the model's module names."""
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
        raise ConfigurationError(
            f"sp_attention_modules={patterns!r} must be a list of module-name patterns, e.g. "
            "['layers.*.attn.core'] (* stands for one name component).")
    named = dict(model.named_modules())
    found: dict[str, torch.nn.Module] = {}
    for key in patterns:
        regex = _pattern(key)
        matches = [name for name in named if regex.fullmatch(name)]
        if not matches:
            sample = ", ".join(n for n in list(named)[1:8])
            raise ConfigurationError(
                f"sp_attention_modules pattern {key!r} matches no module of "
                f"{type(model).__name__} (its modules include {sample}, ...): name the modules "
                "that compute attention from (q, k, v), with * for one name component.")
        found.update((name, named[name]) for name in matches)
    return list(found.items())


def attention_patterns(model: torch.nn.Module, handler: Any) -> list[str] | None:
    """The core-attention patterns: the handler's ``sp_attention_modules``, else the model's
    ``_sp_plan``; None when neither names any."""
    patterns = getattr(handler, "sp_attention_modules", None)
    if patterns is None:
        patterns = getattr(model, "_sp_plan", None)
    return None if patterns is None else list(patterns)

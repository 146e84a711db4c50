"""A tiny Llama-like decoder for the pipeline- and sequence-parallel tests: token embedding,
a ``ModuleList`` of pre-norm blocks (RMSNorm, rotary multi-head attention with grouped
key/value heads, SwiGLU MLP), a final norm and an LM head.

The seams the parallel strategies use are explicit: ``model.layers`` is the list a pipeline
splits per layer (``embed`` goes with the first stage, ``norm``/``lm_head`` with the last), and
each block's ``attn.core`` is the module that turns ``(q, k, v)`` laid out as
``(batch, heads, seq, head_dim)`` into the attention output - what Ulysses wraps with its
all-to-all. Positions come from ``position_ids`` (not from the local sequence length), so a
sequence shard computes the same rotary angles as the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class TinyLlamaConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 4
    num_kv_heads: int = 2
    num_layers: int = 4
    intermediate_size: int = 64
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, position_ids: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of ``x`` (batch, heads, seq, head_dim) at ``position_ids`` (batch, seq)."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / theta ** (torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = position_ids[:, None, :, None].float() * inv_freq  # batch, 1, seq, half
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CoreAttention(nn.Module):
    """Causal scaled-dot-product attention over ``(batch, heads, seq, head_dim)``."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, config: TinyLlamaConfig) -> None:
        super().__init__()
        self.config = config
        d, h, kv = config.head_dim, config.num_heads, config.num_kv_heads
        self.q_proj = nn.Linear(config.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.hidden_size, bias=False)
        self.core = CoreAttention()

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        c = self.config
        q = self.q_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        q, k = rotate(q, position_ids, c.rope_theta), rotate(k, position_ids, c.rope_theta)
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = self.core(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, config: TinyLlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: TinyLlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden_size)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), position_ids)
        return x + self.mlp(self.mlp_norm(x))


class TinyLlama(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, config: TinyLlamaConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or TinyLlamaConfig()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Block(config) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, seq, vocab) of ``input_ids`` (batch, seq)."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
            position_ids = position_ids.expand(input_ids.shape[0], -1)
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h, position_ids)
        return self.lm_head(self.norm(h))


def tiny_llama(seed: int = 0, **overrides) -> TinyLlama:
    """The model with weights drawn from ``seed`` (identical on every rank)."""
    torch.manual_seed(seed)
    return TinyLlama(TinyLlamaConfig(**overrides))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy; ``labels`` (batch, seq) already shifted, -100 ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=-100)


def token_batches(count: int, batch_size: int = 4, seq_len: int = 16, vocab_size: int = 64,
                  seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` (input_ids, labels) batches of a learnable sequence task (labels are the
    inputs shifted by one, last position ignored), the same on every rank."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        start = torch.randint(0, vocab_size, (batch_size, 1), generator=generator)
        ids = (start + torch.arange(seq_len + 1)) % vocab_size
        labels = ids[:, 1:].clone()
        labels[:, -1] = -100
        batches.append((ids[:, :-1].contiguous(), labels))
    return batches

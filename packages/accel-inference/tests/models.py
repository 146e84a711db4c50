"""Small models shared by the tests (imported by file path under --import-mode=importlib)."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.b(torch.relu(self.a(x)))
        return x + self.norm(h.transpose(1, 2)).transpose(1, 2)


class TinyLM(nn.Module):
    """Embedding, blocks, an LM head tied to the embedding."""

    def __init__(self, vocab: int = 32, width: int = 16, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(0.5))
        self.register_buffer("cache", torch.zeros(1), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)
        return self.head(h * self.scale)


def trained(seed: int = 0, **kwargs: int) -> TinyLM:
    torch.manual_seed(seed)
    model = TinyLM(**kwargs).eval()
    for block in model.blocks:  # non-trivial running statistics
        block.norm.running_mean.uniform_(-0.5, 0.5)
        block.norm.running_var.uniform_(0.5, 1.5)
    return model


class EncoderLM(nn.Module):
    """A small transformer LM: activation-heavy, like the models memory estimates are for."""

    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(width, 4, 4 * width,
                                                               batch_first=True)
                                    for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def lm_small() -> EncoderLM:
    return EncoderLM(4000, 192, 3)


def lm_medium() -> EncoderLM:
    return EncoderLM(4000, 256, 4)


def lm_large() -> EncoderLM:
    return EncoderLM(8000, 384, 4)


def mlp() -> nn.Sequential:
    return nn.Sequential(*(nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(8)))

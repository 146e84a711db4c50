"""prepare_pippy in N processes equals the plain model; run through `accel launch`.

argv: OUT_DIR. Rank 0 writes the single-process reference into OUT_DIR/reference.pt before
splitting; every check prints one line; "PIPPY-OK rank=R" at the end.
"""

from __future__ import annotations

import sys

import torch
from accel_inference import prepare_pippy
from accel_state import PartialState
from accel_state.errors import ConfigurationError
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self, width: int = 8, depth: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(4, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def main() -> None:
    state = PartialState()
    rank = state.process_index
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    expected = build()(x)
    with torch.no_grad():
        model = prepare_pippy(build(), split_points=["layers.2"], example_args=(x,))
        out = model(x)
    if state.is_last_process:
        torch.testing.assert_close(out, expected)
        print(f"EXPLICIT-LAST-OK rank={rank}", flush=True)
    else:
        assert out is None
    with torch.no_grad():
        model = prepare_pippy(build(), split_points="auto", example_args=(x,),
                              no_split_module_classes=["Block"], gather_output=True,
                              num_chunks=4)
        out = model(x)
    torch.testing.assert_close(out, expected)
    print(f"AUTO-GATHERED-OK rank={rank} split={model.hf_split_points}", flush=True)
    try:
        prepare_pippy(build(), split_points=["layers.9"], example_args=(x,))
    except ConfigurationError as error:
        assert "layers.9" in str(error)
        print(f"BAD-SPLIT-OK rank={rank}", flush=True)
    print(f"PIPPY-OK rank={rank}", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)

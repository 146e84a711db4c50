"""Big-model inference: a model that does not fit the memory you allow, run anyway.

1. Save a checkpoint (a stand-in for a downloaded one), sharded like the Hub's.
2. Build the model on the meta device (no memory) and load it with device_map="auto"
   under a memory limit: what does not fit goes to disk, read back block by block (the
   next block prefetched on a worker thread while the current one runs).
3. Check the outputs equal the plain model's.

    uv run python examples/big_model_inference.py
    # pipeline-parallel inference over 2 processes (one stage each):
    uv run accel launch --cpu --num_processes 2 examples/big_model_inference.py --pipeline
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from accel import init_empty_weights, load_checkpoint_and_dispatch, prepare_pippy
from accel.utils import compute_module_sizes
from accel_checkpoint import save_model_weights
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 256, depth: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as in most LMs

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def offload_demo(folder: Path) -> None:
    torch.manual_seed(0)
    reference = TinyLM().eval()
    save_model_weights(reference.state_dict(), folder / "ckpt", max_shard_size="2MB")
    with init_empty_weights():
        model = TinyLM()
    total = compute_module_sizes(model)[""]
    model = load_checkpoint_and_dispatch(
        model, folder / "ckpt", device_map="auto", max_memory={"cpu": total // 4},
        no_split_module_classes=["Block"], offload_folder=folder / "offload")
    print("device map:", model.hf_device_map)
    ids = torch.randint(0, 1000, (2, 16))
    with torch.no_grad():
        same = torch.equal(model(ids), reference(ids))
    print(f"model {total / 2**20:.1f} MiB, memory allowed {total / 4 / 2**20:.1f} MiB, "
          f"outputs equal to the plain model: {same}")


def pipeline_demo() -> None:
    from accel import PartialState

    state = PartialState()
    torch.manual_seed(0)
    model = TinyLM().eval()
    ids = torch.randint(0, 1000, (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids)
        model = prepare_pippy(model, split_points="auto", example_args=(ids,),
                              no_split_module_classes=["Block"], gather_output=True)
        out = model(ids)
    state.print(f"split before {model.hf_split_points}; output equal to one process: "
                f"{torch.allclose(out, expected, atol=1e-5)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", action="store_true")
    if parser.parse_args().pipeline:
        pipeline_demo()
        return
    with tempfile.TemporaryDirectory() as folder:
        offload_demo(Path(folder))


if __name__ == "__main__":
    main()

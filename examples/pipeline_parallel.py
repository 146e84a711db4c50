"""Pipeline-parallel training: a small decoder split into stages, one per process.

Run it on 2 CPU processes:

    uv run accel launch --num_processes 2 --cpu examples/pipeline_parallel.py

``ParallelismConfig(pp_size=2)`` cuts the model's ``ModuleList`` of blocks in two: the
embedding and the first half of the blocks live on rank 0, the rest, the final norm and the
head on rank 1. The prepared model's call runs a whole step of the schedule (``--schedule
gpipe``, ``1f1b`` or ``interleaved_1f1b``) on micro-batches of the batch — forward *and*
backward, since 1F1B interleaves them — so it takes the labels (``target=``) and computes
the loss with ``loss_fn`` on the last stage. It returns the batch's mean loss on every rank;
``accelerator.backward(loss)`` then only checks that loss (its gradients are there), and
``optimizer.step()`` updates each rank's own stage. Evaluation is the usual loop:
``model.eval()`` and ``torch.no_grad()`` make the call forward only, returning the last
stage's output (here the logits) on every rank. At the end the main process gathers the
whole model's weights, under their usual names. With 4 processes, ``--dp_shard 2`` adds
FSDP2 over the other dimension.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from accel import Accelerator, ParallelismConfig, PipelineParallelConfig
from torch import nn
from torch.utils.data import DataLoader

VOCAB, SEQ = 32, 16


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Decoder(nn.Module):
    """embedding -> blocks -> norm -> head: the blocks are what the pipeline splits."""

    def __init__(self, width: int = 64, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)  # on later stages: an identity on the hidden states
        for block in self.blocks:  # only this stage's blocks
            x = block(x)
        return self.head(self.norm(x))


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def make_data(num_samples: int = 64, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Sequences counting up from a random start; each label is the next token."""
    generator = torch.Generator().manual_seed(seed)
    data = []
    for start in torch.randint(0, VOCAB, (num_samples,), generator=generator):
        ids = (start + torch.arange(SEQ + 1)) % VOCAB
        data.append((ids[:-1], ids[1:]))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--schedule", default="1f1b",
                        choices=("gpipe", "1f1b", "interleaved_1f1b"))
    parser.add_argument("--dp_shard", type=int, default=1, help="FSDP2 size (processes / 2)")
    args = parser.parse_args()

    pipeline = PipelineParallelConfig(schedule=args.schedule, num_microbatches=4,
                                      loss_fn=next_token_loss)
    accelerator = Accelerator(parallelism_config=ParallelismConfig(
        pp_size=2, dp_shard_size=args.dp_shard, pp_handler=pipeline))
    torch.manual_seed(0)
    model = Decoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(make_data(), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    mine = sorted({name.split(".")[1] for name, _ in
                   accelerator.unwrap_model(model).named_parameters() if name.startswith("blocks")})
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for input_ids, labels in loader:
            loss = model(input_ids, target=labels)  # the whole pipeline step
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total, batches = total + accelerator.reduce(loss, "mean").item(), batches + 1
        accelerator.print(f"epoch {epoch} loss {total / batches:.4f}")
    model.eval()
    correct = seen = 0
    with torch.no_grad():  # forward only: the logits on every rank
        for input_ids, labels in loader:
            logits, labels = accelerator.gather_for_metrics((model(input_ids), labels))
            correct += (logits.argmax(-1) == labels).sum().item()
            seen += labels.numel()
    model.train()
    print(f"rank {accelerator.process_index} next-token accuracy {correct / seen:.3f}")
    print(f"rank {accelerator.process_index} holds blocks {', '.join(mine)}")
    weights = accelerator.get_state_dict(model)  # every rank calls it; the main one gets it
    if accelerator.is_main_process:
        print(f"whole model gathered: {len(weights)} tensors, head.weight "
              f"{tuple(weights['head.weight'].shape)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

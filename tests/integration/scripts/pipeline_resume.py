"""Pipeline-parallel resume across launches: a staged model saved in one `accel launch`
resumes exactly in a fresh one, at the same and at another stage split.

A SPLIT names the pipeline: ``gpipe`` (2 processes, one stage of 2 layers each),
``interleaved`` (2 processes, interleaved 1F1B: 2 stages of 1 layer each) or ``single``
(1 process, no pipeline).
``save OUT SPLIT``: trains HALF steps, saves ``OUT/ckpt``, trains the rest; rank 0 writes
the losses of the second half and the final weights (``OUT/straight.pt``).
``resume OUT SPLIT:exact|close ...``: for each SPLIT in turn, a fresh Accelerator loads
``OUT/ckpt`` and trains the second half: its losses and final weights must equal the
uninterrupted run's, bitwise (``exact``: the same split) or to 1e-6 (``close``: another
split, whose micro-batches change the order of sums).
Every check prints one ``...-OK rank=R`` line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from accel import Accelerator
from accel_parallel import ParallelismConfig
from accel_parallel.pipeline import PipelineParallelConfig
from tiny_llama import lm_loss, tiny_llama, token_batches
from torch.utils.data import DataLoader, TensorDataset

STEPS, HALF, BATCH = 6, 3, 8


def prepared(split: str):
    if split == "single":
        accelerator = Accelerator(cpu=True)
    else:
        schedule = "gpipe" if split == "gpipe" else "interleaved_1f1b"
        handler = PipelineParallelConfig(schedule=schedule, num_microbatches=2,
                                         loss_fn=lm_loss)
        accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(
            pp_size=2, pp_handler=handler))
    batches = token_batches(STEPS, batch_size=BATCH)
    data = TensorDataset(torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    model = tiny_llama(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                   DataLoader(data, batch_size=BATCH))
    return accelerator, model, optimizer, list(loader)


def step(accelerator, model, optimizer, batch, split: str) -> float:
    ids, labels = batch
    loss = lm_loss(model(ids), labels) if split == "single" else model(ids, target=labels)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def resume(out: Path, split: str, exact: bool, rank: int) -> None:
    accelerator, model, optimizer, batches = prepared(split)
    accelerator.load_state(out / "ckpt")
    losses = [step(accelerator, model, optimizer, b, split) for b in batches[HALF:]]
    weights = accelerator.get_state_dict(model)
    if rank == 0:
        want = torch.load(out / "straight.pt")
        tol = {"atol": 0.0, "rtol": 0.0} if exact else {"atol": 1e-6, "rtol": 1e-5}
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(want["losses"]), **tol)
        assert list(weights) == list(want["weights"])
        for key, value in want["weights"].items():
            torch.testing.assert_close(weights[key], value, **tol, msg=key)
    print(f"RESUMED-{split}-OK rank={rank}", flush=True)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    if mode == "save":
        split = sys.argv[3]
        accelerator, model, optimizer, batches = prepared(split)
        for batch in batches[:HALF]:
            step(accelerator, model, optimizer, batch, split)
        accelerator.save_state(out / "ckpt")
        losses = [step(accelerator, model, optimizer, b, split) for b in batches[HALF:]]
        weights = accelerator.get_state_dict(model)
        if rank == 0:
            torch.save({"losses": losses, "weights": weights}, out / "straight.pt")
        print(f"SAVED-OK rank={rank}", flush=True)
        return
    for item in sys.argv[3:]:
        split, _, how = item.partition(":")
        resume(out, split, how == "exact", rank)


if __name__ == "__main__":
    main()

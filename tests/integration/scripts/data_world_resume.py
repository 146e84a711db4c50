"""One stage of a chain of runs that save with one number of processes and resume with
another (issue 25 item 5), for DDP and FSDP2 in the same processes.

argv: work directory, stage number, steps to train (``end``: to the end of the epoch and
through the next one). Each stage loads the previous stage's checkpoint of the same
strategy (if any), trains, records the sample ids every rank saw per step, and saves.
Two loaders are prepared: a shuffled map-style one (DDP: the default sampler, FSDP2: the
seedable one) and an IterableDataset, which several processes read through the
dispatcher (rank 0 reads and sends). The test puts the stages together.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel._accelerator_state import AcceleratorState
from accel.utils import DataLoaderConfiguration
from accel_state.gradient_state import GradientState
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

SIZE, BATCH = 50, 2  # 25 user batches per epoch: no world of 1, 2 or 4 divides it


class Stream(IterableDataset):
    """Ids with a feature, always in the same order."""

    def __iter__(self):
        for i in range(SIZE):
            yield torch.tensor(i), torch.full((4,), float(i) / SIZE)


def run(strategy: str, work: Path, stage: int, steps: str) -> None:
    plugin = FullyShardedDataParallelPlugin() if strategy == "fsdp" else None
    config = DataLoaderConfiguration(use_seedable_sampler=strategy == "fsdp", data_seed=5,
                                     exact_resume=True)
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin, dataloader_config=config)
    torch.manual_seed(0)
    ids = torch.arange(SIZE)
    data = TensorDataset(ids, torch.randn(SIZE, 4))
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, shuffled, stream = accelerator.prepare(
        model, optimizer, DataLoader(data, batch_size=BATCH, shuffle=True),
        DataLoader(Stream(), batch_size=BATCH))
    previous = work / f"{strategy}-{stage - 1}"
    caught = []
    if previous.exists():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            accelerator.load_state(previous)
    seen: dict[str, list] = {"map": [], "stream": [], "epochs": []}
    epochs = 2 if steps == "end" else 1
    for _ in range(epochs):
        start_epoch = shuffled.iteration
        pairs = zip(shuffled, stream, strict=True)  # the two loaders stay in step
        for step, ((batch_ids, x), (stream_ids, y)) in enumerate(pairs):
            loss = (model(x).sum() + model(y).sum()) ** 2
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen["map"].append(batch_ids.tolist())
            seen["stream"].append(stream_ids.tolist())
            seen["epochs"].append(start_epoch)
            if steps != "end" and step + 1 == int(steps):
                break
    messages = [str(w.message) for w in caught]
    seen["warnings"] = [m for m in messages if "exactly-once only if" in m]
    seen["world"] = accelerator.num_processes
    seen["type"] = str(accelerator.distributed_type)
    rank = accelerator.process_index
    (work / f"{strategy}-{stage}-rank{rank}.json").write_text(json.dumps(seen))
    accelerator.save_state(work / f"{strategy}-{stage}")
    accelerator.wait_for_everyone()
    print(f"WORLD-RESUME-OK {strategy} stage={stage} world={accelerator.num_processes} "
          f"rank={rank}", flush=True)
    accelerator.end_training()
    AcceleratorState._reset_state()  # the next strategy builds its own state
    GradientState._reset_state()


def main(work: Path, stage: int, steps: str) -> None:
    for strategy in ("ddp", "fsdp"):
        run(strategy, work, stage, steps)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])

"""gather_for_metrics on 2 processes for every split_batches x dispatch_batches x
even_batches combination (issue 37.4), on datasets whose last batch is uneven:

    accel launch --cpu --num_processes 2 gather_checks.py

Each case runs an "evaluation" as transformers' Trainer does: a per-sample value, the
names (objects), and a per-batch loss repeated ``batch_size`` times (the loader's batch
size, whatever the process got) are gathered every step. The per-sample values must be
exactly the dataset's, in order, equal to a 1-process pass; the repeated loss must keep, of
the final step, as many values as it holds real samples (what Accelerate keeps; it kept
all 16 where Accelerate keeps 8 with split+dispatch); the per-row loss mean must be a
1-process pass's. The last case goes through the Accelerator facade.
"""

from __future__ import annotations

import itertools

import torch
from accel_data import gather_for_metrics, prepare_data_loader
from accel_state import GradientState, PartialState, gather_object
from torch.utils.data import DataLoader, Dataset

from accel import Accelerator, DataLoaderConfiguration

# (samples, batch size of the user's loader): last batches of 5, 1, 3 and 2 samples; with
# 37/8 the ranks take 3 and 2 batches when the batches are neither split, dispatched nor
# evened (no per-step collective can run then: it is left out, as in Accelerate's docs)
SIZES = ((37, 8), (33, 4), (19, 4), (37, 5))


class Rows(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"idx": i, "x": float(i) * 0.5, "name": f"s{i}"}


def collate(items: list[dict]) -> dict:
    return {"idx": torch.tensor([it["idx"] for it in items]),
            "x": torch.tensor([it["x"] for it in items]),
            "name": [it["name"] for it in items]}


def per_sample(batch: dict) -> torch.Tensor:
    return batch["x"] * 3.0 + 1.0  # a model's per-sample output


def run_case(n: int, size: int, split: bool, dispatch: bool, even: bool) -> str:
    case = f"n={n} bs={size} split={split} dispatch={dispatch} even={even}"
    truth = DataLoader(Rows(n), batch_size=size, collate_fn=collate)  # a 1-process pass
    values = torch.cat([per_sample(b) for b in truth])
    loader = prepare_data_loader(DataLoader(Rows(n), batch_size=size, collate_fn=collate),
                                 split_batches=split, dispatch_batches=dispatch,
                                 even_batches=even)
    if len(set(gather_object([len(loader)]))) != 1:
        return "uneven"  # the ranks take different numbers of steps
    idx, out, names, repeated, losses = [], [], [], [], []
    for batch in loader:
        idx.append(gather_for_metrics(batch["idx"]))
        out.append(gather_for_metrics(per_sample(batch)))
        names += gather_for_metrics(batch["name"])
        loss = per_sample(batch).mean() if len(batch["idx"]) else torch.tensor(0.0)
        repeated.append(gather_for_metrics(loss.repeat(size)))
        losses.append(gather_for_metrics(per_sample(batch) ** 2))
        at_end = GradientState().end_of_dataloader
    assert at_end, case
    assert torch.cat(idx).tolist() == list(range(n)), (case, torch.cat(idx).tolist())
    assert torch.equal(torch.cat(out), values), case
    assert names == [f"s{i}" for i in range(n)], (case, names)
    assert torch.equal(torch.cat(losses), values ** 2), case
    global_rows = size if split else size * 2
    last_rows = n % global_rows or global_rows
    assert len(repeated[-1]) == (last_rows if last_rows < global_rows else 2 * size), \
        (case, len(repeated[-1]), last_rows)
    return "ok"


def check_cases() -> tuple[int, int]:
    ok = uneven = 0
    for (n, size), (split, dispatch, even) in itertools.product(
            SIZES, itertools.product((False, True), repeat=3)):
        if split and size % 2:
            continue  # split_batches needs a batch size the 2 processes divide
        result = run_case(n, size, split, dispatch, even)
        ok += result == "ok"
        uneven += result == "uneven"
    return ok, uneven


def check_facade() -> None:
    """The issue's case: Accelerator(split_batches + dispatch_batches), Trainer's loop."""
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        split_batches=True, dispatch_batches=True))
    n, size = 37, 8
    loader = accelerator.prepare(DataLoader(Rows(n), batch_size=size, collate_fn=collate))
    kept, rows, seen = [], [], []
    for batch in loader:
        seen.append(len(batch["idx"]))
        rows.append(accelerator.gather_for_metrics(batch["idx"]))
        kept.append(accelerator.gather_for_metrics(per_sample(batch).mean().repeat(size)))
    assert torch.cat(rows).tolist() == list(range(n))
    # Accelerate 1.15's parts: the final 5 samples plus 1 of the epoch's first, 3 and 3
    assert seen == [4, 4, 4, 4, 3], seen
    assert [len(k) for k in kept] == [16, 16, 16, 16, 5], [len(k) for k in kept]


def main() -> None:
    state = PartialState()
    assert state.num_processes == 2, state.num_processes
    ok, uneven = check_cases()
    check_facade()
    print(f"GATHER-OK rank={state.process_index} cases={ok} uneven={uneven}", flush=True)


if __name__ == "__main__":
    main()

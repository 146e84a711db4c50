"""accel-data in 2 real processes: every sharding mode, gather_for_metrics, resume.

    accel launch --cpu --num_processes 2 data_checks.py OUT_DIR save
    accel launch --cpu --num_processes 2 data_checks.py OUT_DIR resume

``save`` loops in-process over split_batches x even_batches x dispatch_batches x
(map-style, iterable) x (length divisible or not, or shorter than one global batch),
checks coverage, gather_for_metrics, end_of_dataloader and an in-process resume, then
writes mid-epoch dataloader states and the batches that must follow them. ``resume``
(a new pair of processes) loads those states into fresh loaders and compares.
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import sys
from pathlib import Path

import torch
from accel_data import (
    DataLoaderConfiguration,
    DataLoaderDispatcher,
    SeedableRandomSampler,
    gather_for_metrics,
    prepare_data_loader,
    skip_first_batches,
)
from accel_state import GradientState, PartialState, gather_object
from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader, Dataset, IterableDataset

GLOBAL = 6  # samples per step across the 2 ranks in every configuration
LENGTHS = (24, 23, 20, 5)  # divisible, not (20: ranks get unequal counts), < one step


class Items(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(range(self.n))


def collate(items):
    """Nested, variable-shaped batches with a non-tensor leaf (the dispatcher must cope)."""
    idx = torch.tensor(items)
    width = 1 + int(idx.max()) % 4  # changes from batch to batch
    return {"idx": idx, "pad": idx[:, None].repeat(1, width).float(),
            "name": [f"s{i}" for i in items]}


def loader_for(n, iterable, split, shuffle=False):
    dataset = Stream(n) if iterable else Items(n)
    batch_size = GLOBAL if split else GLOBAL // 2
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle and not iterable,
                      collate_fn=collate)


def prepared(n, iterable, split, even, dispatch, shuffle=False):
    return prepare_data_loader(loader_for(n, iterable, split, shuffle), split_batches=split,
                               even_batches=even, dispatch_batches=dispatch)


def check_epoch(case, n, iterable, split, even, dispatch):
    loader = prepared(n, iterable, split, even, dispatch)
    assert isinstance(loader, DataLoaderDispatcher) == dispatch, case
    lengths = gather_object([len(loader)])
    lockstep = len(set(lengths)) == 1  # else a per-batch collective cannot be used
    mine, gathered, names, ends = [], [], [], []
    for batch in loader:
        assert batch["pad"].shape[0] == batch["idx"].shape[0], case
        assert torch.equal(batch["pad"][:, 0], batch["idx"].float()), case
        assert batch["name"] == [f"s{i}" for i in batch["idx"].tolist()], case
        mine += batch["idx"].tolist()
        ends.append(GradientState().end_of_dataloader)
        if lockstep:
            gathered += gather_for_metrics(batch["idx"]).tolist()
            names += gather_for_metrics(batch["name"])
    assert len(ends) == len(loader), (case, len(ends), len(loader))
    assert ends == [False] * (len(ends) - 1) + [True], case
    every = gather_object(mine)
    counts = collections.Counter(every)
    assert sorted(counts) == list(range(n)), (case, sorted(counts))
    padded = even and n % GLOBAL != 0
    if not padded:
        assert len(every) == n, (case, "duplicates without padding", every)
    else:
        extra = [i for i, c in counts.items() for _ in range(c - 1)]
        assert len(extra) < GLOBAL and all(i < GLOBAL for i in extra), (case, extra)
    if lockstep:
        assert gathered == list(range(n)), (case, gathered)
        assert names == [f"s{i}" for i in range(n)], (case, names)
    return lockstep


def epoch_batches(loader, stop=None):
    out = []
    for batch in loader:
        out.append(batch["idx"].tolist())
        if stop is not None and len(out) == stop:
            break
    return out


def check_resume(case, n, iterable, split, even, dispatch, saved):
    """Stop after k batches of epoch 1, restore into a fresh loader, compare with the truth."""
    args = (n, iterable, split, even, dispatch, True)
    torch.manual_seed(0)  # shuffling draws from the global RNG, as in Accelerate
    truth = prepared(*args)
    epochs = [epoch_batches(truth) for _ in range(4)]
    k = max(min(gather_object([len(epochs[1]) // 2])), 1)  # the same stop on every rank
    torch.manual_seed(0)
    run = prepared(*args)
    epoch_batches(run)
    assert epoch_batches(run, stop=k) == epochs[1][:k], case
    state, rng = run.state_dict(), torch.get_rng_state()  # what a checkpoint saves
    done = k == len(epochs[1])  # stopped on the last batch: epoch 1 is over
    assert (state["epoch"], state["batches_yielded"]) == ((2, 0) if done else (1, k)), (
        case, state)
    after, following = (epochs[2], epochs[3]) if done else (epochs[1][k:], epochs[2])
    fresh = prepared(*args)
    fresh.load_state_dict(state)
    torch.set_rng_state(rng)  # and restores
    assert len(fresh) == len(after) or dispatch or not even, case
    assert epoch_batches(fresh) == after, case
    assert epoch_batches(fresh) == following, case  # later epochs are whole again
    torch.manual_seed(0)
    again = prepared(*args)  # skip_first_batches: the same position, another route
    epoch_batches(again)
    rest = skip_first_batches(again, k)
    assert epoch_batches(rest) == epochs[1][k:] and again.iteration == 2, case
    assert epoch_batches(again) == epochs[2], case
    saved.append({"case": list(map(int, [n, iterable, split, even, dispatch])),
                  "state": state, "rest": after, "next": following,
                  "rng": rng.tolist()})


def check_accelerator():
    """The facade: dataloader_config reaches the loaders; errors name the fix."""
    from accel import Accelerator

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        split_batches=True, data_seed=7))
    loader = accelerator.prepare(DataLoader(Items(23), batch_size=4, shuffle=True))
    seen = []
    for batch in loader:
        seen += accelerator.gather_for_metrics(batch).tolist()
    assert sorted(seen) == list(range(23)) and len(seen) == 23, seen
    try:
        accelerator.prepare(DataLoader(Items(8), batch_size=3))
    except ConfigurationError as error:
        assert "multiple of 2" in str(error), error
    else:
        raise AssertionError("split_batches with batch size 3 on 2 processes must fail")
    objects = []
    for batch in accelerator.prepare(DataLoader(Items(9), batch_size=2)):
        objects += accelerator.gather_for_metrics([f"x{i}" for i in batch.tolist()])
    assert objects == [f"x{i}" for i in range(9)], objects


def _union_epochs(loader):
    return [[b.tolist() for b in loader] for _ in range(2)]


def check_union(n, split, even, drop, dispatch, seedable):
    """Step by step, the 2 ranks' batches together are what 1 process sees with the whole
    batch (Accelerate's multi-process test); the last may be followed by padding."""
    case = f"union n={n} split={split} even={even} drop={drop} dispatch={dispatch}"

    def loader(batch_size):
        torch.manual_seed(0)
        return DataLoader(Items(n), batch_size=batch_size, shuffle=True, drop_last=drop)

    reference = _union_epochs(prepare_data_loader(
        loader(GLOBAL), num_processes=1, process_index=0, use_seedable_sampler=seedable))
    mine = _union_epochs(prepare_data_loader(
        loader(GLOBAL if split else GLOBAL // 2), split_batches=split, even_batches=even,
        dispatch_batches=dispatch, use_seedable_sampler=seedable))
    ranks = gather_object([mine])
    for epoch, expected in enumerate(reference):
        steps = max(len(rank[epoch]) for rank in ranks)
        got = [[i for rank in ranks if k < len(rank[epoch]) for i in rank[epoch][k]]
               for k in range(steps)]
        assert len(got) == len(expected), (case, got, expected)
        for k, (union, batch) in enumerate(zip(got, expected)):
            padded = even and not drop and k == len(expected) - 1
            assert (union[:len(batch)] if padded else union) == batch, (case, got, expected)


def check_regression(seedable, split):
    """Accelerate's test_script training_check: training on 2 processes (a shuffling loader
    seeded through a torch.Generator) gives the model one process gives on the whole batch
    (off by ~1e-3 when the sampler consumed the generator unlike Accelerate's)."""
    from accel import Accelerator
    from accel.utils import set_seed

    def data(generator, batch_size):
        if seedable:  # as Accelerate's test: the user's own SeedableRandomSampler
            sampler = SeedableRandomSampler(train_set, generator=generator)
            return DataLoader(train_set, batch_size=batch_size, sampler=sampler)
        return DataLoader(train_set, batch_size=batch_size, shuffle=True, generator=generator)

    def train(loader, model, backward):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer = accelerator.prepare(optimizer) if backward is not None else optimizer
        for _ in range(3):
            for x, y in loader:
                model.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x[:, None]).squeeze(-1), y)
                (backward or torch.Tensor.backward)(loss)
                optimizer.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    set_seed(42)
    xs = torch.randn(64)
    train_set = torch.utils.data.TensorDataset(xs, 2 * xs + 3 + 0.1 * torch.randn(64))
    initial = torch.nn.Linear(1, 1)
    generator = torch.Generator().manual_seed(42)
    expected = train(data(generator, 16), copy.deepcopy(initial), None)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        split_batches=split, use_seedable_sampler=seedable))
    set_seed(42)
    model = accelerator.prepare(copy.deepcopy(initial))
    loader = accelerator.prepare(data(generator, 16 if split else 8))
    set_seed(42)
    generator.manual_seed(42)
    got = train(loader, model, accelerator.backward)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def save(out):
    state = PartialState(cpu=True)
    assert state.num_processes == 2
    saved, lockstep = [], 0
    for n, iterable, split, even, dispatch in itertools.product(
            LENGTHS, (False, True), (False, True), (True, False), (False, True)):
        case = f"n={n} iterable={iterable} split={split} even={even} dispatch={dispatch}"
        lockstep += check_epoch(case, n, iterable, split, even, dispatch)
        check_resume(case, n, iterable, split, even, dispatch, saved)
    check_accelerator()
    unions = 0
    for n, split, even, drop, dispatch, seedable in itertools.product(
            LENGTHS, (False, True), (True, False), (False, True), (False, True), (False, True)):
        if seedable or dispatch:  # torch's sampler alone draws at prepare time otherwise
            check_union(n, split, even, drop, dispatch, seedable)
            unions += 1
    print(f"DATA-UNION-OK rank={state.process_index} cases={unions}")
    for seedable, split in itertools.product((False, True), (False, True)):
        check_regression(seedable, split)
    print(f"DATA-REGRESSION-OK rank={state.process_index}")
    if state.is_main_process:
        Path(out, "states.json").write_text(json.dumps(saved))
    state.wait_for_everyone()
    print(f"DATA-SAVE-OK rank={state.process_index} cases={len(saved)} lockstep={lockstep}")


def resume(out):
    state = PartialState(cpu=True)
    torch.manual_seed(1234 + state.process_index)  # a different seed than the saving run
    saved = json.loads(Path(out, "states.json").read_text())
    for entry in saved:
        n, iterable, split, even, dispatch = entry["case"]
        fresh = prepared(n, bool(iterable), bool(split), bool(even), bool(dispatch), True)
        fresh.load_state_dict(entry["state"])
        torch.set_rng_state(torch.tensor(entry["rng"], dtype=torch.uint8))  # a checkpoint's
        # each rank saved rank 0's view: compare on rank 0, keep collectives in step on all
        rest, following = epoch_batches(fresh), epoch_batches(fresh)
        if state.is_main_process:
            assert rest == entry["rest"], (entry["case"], rest, entry["rest"])
            assert following == entry["next"], entry["case"]
    state.wait_for_everyone()
    print(f"DATA-RESUME-OK rank={state.process_index} cases={len(saved)}")


if __name__ == "__main__":
    # argv: OUT MODE [groups]; "groups" then runs data_groups.py's checks in the same
    # processes (one launch less; test_data_multiprocess reads each marker separately)
    {"save": save, "resume": resume}[sys.argv[2]](sys.argv[1])
    if "groups" in sys.argv[3:]:
        from data_groups import main as groups_main

        groups_main()

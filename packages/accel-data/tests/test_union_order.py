"""N processes x batch b see, step by step, what 1 process sees with batch N*b (Accelerate's
multi-process test compares a 2-process run with a 1-process run on the full batch). The
ranks are simulated as real ones start: same seed, a fresh loader each. Dispatching needs
real processes: tests/integration/scripts/data_union.py runs those cases."""

from __future__ import annotations

import itertools

import pytest
import torch
from accel_data import prepare_data_loader
from torch.utils.data import DataLoader

SHUFFLES = {"none": {}, "generator": {"generator": 7}, "seedable": {"seedable": True},
            "seedable+generator": {"generator": 7, "seedable": True}}


def _loader(length, batch_size, drop_last, shuffle):
    torch.manual_seed(0)
    generator = None
    if "generator" in shuffle:
        generator = torch.Generator().manual_seed(shuffle["generator"])
    return DataLoader(list(range(length)), batch_size=batch_size, shuffle=bool(shuffle),
                      drop_last=drop_last, generator=generator)


def _epochs(num, rank, length, batch_size, drop_last, shuffle, **options):
    loader = _loader(length, batch_size, drop_last, shuffle)
    prepared = prepare_data_loader(loader, num_processes=num, process_index=rank,
                                   use_seedable_sampler=shuffle.get("seedable", False),
                                   **options)
    return [[b.tolist() for b in prepared] for _ in range(2)]


def check_union(num, length, per_rank, split, even, drop, shuffle):
    """Concatenated over ranks, step k is the 1-process loader's batch k (the last one may
    be followed by the wrap-around padding of even_batches)."""
    whole = per_rank if split else per_rank * num
    reference = _epochs(1, 0, length, whole, drop, shuffle)
    size = whole if split else per_rank
    ranks = [_epochs(num, r, length, size, drop, shuffle, split_batches=split,
                     even_batches=even) for r in range(num)]
    for epoch, expected in enumerate(reference):
        steps = max(len(rank[epoch]) for rank in ranks)
        got = [[i for rank in ranks if k < len(rank[epoch]) for i in rank[epoch][k]]
               for k in range(steps)]
        assert len(got) == len(expected), (epoch, got, expected)
        for k, (union, batch) in enumerate(zip(got, expected)):
            padded = even and not drop and k == len(expected) - 1
            assert (union[:len(batch)] if padded else union) == batch, (epoch, k, got, expected)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("shuffle", list(SHUFFLES))
def test_n_processes_see_what_one_process_sees_with_the_whole_batch(num, shuffle):
    for length, split, even, drop in itertools.product((16, 13, 5), (False, True),
                                                       (True, False), (False, True)):
        check_union(num, length, 4 if split else 2, split, even, drop, SHUFFLES[shuffle])

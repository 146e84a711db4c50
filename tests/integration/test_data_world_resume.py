"""Saved by N processes, resumed by M: every sample of the epoch is seen exactly once, for
DDP and FSDP2 (issue 25 item 5).

One chain of real runs (``scripts/data_world_resume.py``, both strategies in the same
processes), each stage loading the previous stage's checkpoint: 1 -> 2 -> 4 -> 2 -> 1
processes, i.e. the four changes 1->2, 2->4, 4->2 and 2->1, three of them mid-round (the
position is no whole number of the new world's rounds). The one-process stages run in
the test's own process. The last stage finishes the epoch and runs the next one.
"""

from __future__ import annotations

import json

import pytest
from accel_data import prepare_data_loader
from torch.utils.data import DataLoader

STAGES = [(1, "3"), (2, "2"), (4, "2"), (2, "1"), (1, "end")]  # (processes, steps)
SIZE, BATCH = 50, 2  # as in the script


def _dealt(per_rank: list[list[list[int]]]) -> list[int]:
    """The ranks' batches step by step, rank by rank (the order Accelerate deals them)."""
    flat = []
    for step in zip(*per_rank, strict=True):  # every rank took the same steps
        for batch in step:
            flat += batch
    return flat


@pytest.mark.multiprocess
def test_resume_on_another_world_size_sees_the_epoch_exactly_once(explain, launch, run_here,
                                                                  scripts, tmp_path, capsys):
    script = scripts / "data_world_resume.py"
    for stage, (world, steps) in enumerate(STAGES):
        if world == 1:
            run_here(script, str(tmp_path), str(stage), steps)
            out = capsys.readouterr().out
        else:
            proc = launch("--cpu", "--num_processes", str(world), str(script), str(tmp_path),
                          str(stage), steps, timeout=300)
            assert proc.returncode == 0, explain(proc)
            out = proc.stdout
        assert f"WORLD-RESUME-OK fsdp stage={stage} world={world} rank={world - 1}" in out, out
    for strategy in ("ddp", "fsdp"):
        records = [[json.loads((tmp_path / f"{strategy}-{stage}-rank{rank}.json").read_text())
                    for rank in range(world)] for stage, (world, _) in enumerate(STAGES)]
        if strategy == "fsdp":
            assert {r["type"] for stage in records for r in stage} == {"DistributedType.FSDP"}
        first, second = _epochs(records[-1][0]["map"], records[-1][0]["epochs"])
        epoch0 = [x for stage in records[:-1] for x in _dealt([r["map"] for r in stage])]
        epoch0 += [x for batch in first for x in batch]
        assert sorted(epoch0) == list(range(SIZE)), (strategy, epoch0)  # each sample once
        stream = [x for stage in records[:-1] for x in _dealt([r["stream"] for r in stage])]
        stream += [x for batch in records[-1][0]["stream"][:len(first)] for x in batch]
        assert stream == list(range(SIZE)), (strategy, stream)  # in order, once
        next_epoch = [x for batch in second for x in batch]
        if strategy == "fsdp":  # the seedable sampler: epoch 1 as a fresh run draws it
            fresh = prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=BATCH,
                                                   shuffle=True),
                                        use_seedable_sampler=True, data_seed=5)
            fresh.set_epoch(1)
            assert next_epoch == [int(x) for batch in fresh for x in batch]
        else:
            assert sorted(next_epoch) == list(range(SIZE))
        # every change of world warned for the iterable dataset (accel cannot know it
        # yields the same items again) and only for it: the map-style sampler is known
        for stage in records[1:]:
            for rank in stage:
                assert len(rank["warnings"]) == 1, rank["warnings"]
                assert "IterableDataset Stream" in rank["warnings"][0]


def _epochs(batches: list[list[int]], epochs: list[int]):
    """The last stage's batches split into the rest of epoch 0 and epoch 1."""
    assert set(epochs) == {0, 1} and epochs == sorted(epochs)
    cut = epochs.index(1)
    assert len(batches) - cut == SIZE // BATCH  # the whole next epoch
    return batches[:cut], batches[cut:]


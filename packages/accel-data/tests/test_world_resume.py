"""Exactly-once resume across a change of world size, with simulated ranks in one process.

Every rank of a world is a fresh ``prepare_data_loader(num_processes=N, process_index=r)``
built the way a real process builds it (same seed). A run of N ranks consumes ``k``
batches each, rank 0's ``state_dict()`` is loaded into the M ranks of a new world, and
they finish the epoch and run the next. Checked: what the new world deals is the rest
of the epoch's order in Accelerate's round-robin order, once, except ``even_batches``
padding (taken from the epoch's first samples) and ``drop_last``'s dropped tail; the
next epoch is the one a fresh run of M processes sees. The reference order of the rest is
what one process resumed from the same state yields (it only skips batches).
"""

from __future__ import annotations

import collections
import itertools
import json
import warnings

import pytest
import torch
from accel_data import DataLoaderDispatcher, prepare_data_loader
from accel_state.errors import ConfigurationError
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

SIZE = 37  # not a multiple of any batch size or world: every epoch ends on a short round


class Batches(BatchSampler):
    """A batch sampler of the user's own class: the shard's general (non-fast) path."""


class Varying:
    """Batches of varying size without a ``batch_size``: the shard's whole-batch padding."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):
        i, width = 0, 1
        while i < self.size:
            yield list(range(i, min(i + width, self.size)))
            i, width = i + width, width % 3 + 1

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(SIZE))

    def __len__(self) -> int:
        return SIZE


def _loader(kind: str, batch_size: int, drop_last: bool) -> DataLoader:
    data = list(range(SIZE))
    if kind == "custom":
        return DataLoader(data, batch_sampler=Batches(SequentialSampler(data), batch_size,
                                                      drop_last))
    if kind == "varying":
        return DataLoader(data, batch_sampler=Varying(SIZE))
    if kind == "items":
        return DataLoader(data, batch_size=None, shuffle=True)
    if kind == "stream":
        return DataLoader(Stream(), batch_size=batch_size, drop_last=drop_last)
    return DataLoader(data, batch_size=batch_size, shuffle=kind != "sequential",
                      drop_last=drop_last)


def _world(world: int, kind: str, batch_size: int = 2, drop_last: bool = False,
           **options):
    if kind == "seedable":
        options.update(use_seedable_sampler=True, data_seed=11)
    ranks = []
    for rank in range(world):
        torch.manual_seed(0)  # every process starts alike
        ranks.append(prepare_data_loader(_loader(kind, batch_size, drop_last),
                                         num_processes=world, process_index=rank, **options))
    return ranks


def _values(batch) -> list[int]:
    if isinstance(batch, torch.Tensor):
        return batch.reshape(-1).tolist()
    return [int(batch)] if isinstance(batch, int) else [int(x) for x in batch]


def _take(loader, count: int | None) -> list[list[int]]:
    out = []
    for batch in itertools.islice(loader, count):
        out.append(_values(batch))
    return out


def _dealt(per_rank: list[list[list[int]]]) -> list[int]:
    """The ranks' batches in the order Accelerate deals them: step by step, rank by rank."""
    flat = []
    for step in itertools.zip_longest(*per_rank):
        for batch in step:
            flat += batch or []
    return flat


CASES = [  # (saved world, resumed world, batches each saved rank consumed)
    (2, 1, 3), (1, 2, 3), (2, 4, 3), (4, 2, 1), (3, 2, 2), (1, 4, 2), (2, 2, 3)]


@pytest.mark.parametrize("kind", ["sequential", "seedable", "shuffle", "custom"])
@pytest.mark.parametrize("even_batches,drop_last", [(True, False), (False, False),
                                                    (True, True)])
@pytest.mark.parametrize("saved,resumed,k", CASES)
def test_rest_of_the_epoch_is_dealt_once_over_the_new_world(kind, even_batches, drop_last,
                                                            saved, resumed, k):
    _check(kind, saved, resumed, k, even_batches=even_batches, drop_last=drop_last)


@pytest.mark.parametrize("saved,resumed,k", [(2, 1, 2), (1, 2, 3), (2, 4, 1), (4, 2, 2)])
@pytest.mark.parametrize("even_batches", [True, False])
def test_split_batches_resume_over_another_world(saved, resumed, k, even_batches):
    _check("seedable", saved, resumed, k, batch_size=4, split_batches=True,
           even_batches=even_batches)


@pytest.mark.parametrize("kind", ["varying", "items"])
@pytest.mark.parametrize("saved,resumed,k", [(2, 1, 3), (1, 2, 3), (2, 4, 1), (4, 2, 2)])
def test_batch_samplers_without_a_size_and_item_loaders(kind, saved, resumed, k):
    _check(kind, saved, resumed, k, known_order=kind != "varying")


def _check(kind, saved, resumed, k, *, batch_size=2, drop_last=False, known_order=True,
           **options):
    before = _world(saved, kind, batch_size, drop_last, **options)
    seen = [_take(loader, k) for loader in before]
    state = json.loads(json.dumps(before[0].state_dict()))  # as a checkpoint stores it
    assert state["num_processes"] == saved
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one = _world(1, kind, batch_size, drop_last, **options)[0]
        one.load_state_dict(state)
        after = _world(resumed, kind, batch_size, drop_last, **options)
        for loader in after:
            loader.load_state_dict(state)
    lengths = [len(loader) for loader in after]
    rest = [_take(loader, None) for loader in after]
    reference = [x for batch in _take(one, None) for x in batch]  # the rest, in order
    dealt = _dealt(rest)
    order = _dealt(seen) + reference  # the epoch's order, as it was drawn when saved
    ranked_warnings = [w for w in caught if "exactly-once only if" in str(w.message)
                       and (kind != "stream" or "IterableDataset Stream yields" in
                            str(w.message))]
    assert bool(ranked_warnings) == (not known_order and saved != resumed), caught
    assert lengths == [len(batches) for batches in rest]  # len() knew the resumed pass
    if options.get("even_batches", True) and not drop_last:
        assert len({len(batches) for batches in rest}) == 1  # the ranks stay in lockstep
        padding = dealt[len(reference):]
        assert dealt[:len(reference)] == reference
        assert padding == order[:len(padding)]  # from the epoch's first samples
    elif drop_last and not options.get("split_batches"):
        per_step = resumed * batch_size
        kept = len(reference) // batch_size // resumed * per_step
        assert dealt == reference[:kept]  # the incomplete last round is dropped
    else:
        assert dealt == reference
    counts = collections.Counter(_dealt(seen) + dealt[:len(reference)])
    assert set(counts.values()) == {1}  # nothing of the epoch seen twice
    if not drop_last:
        assert sorted(counts) == sorted(set(order))  # and nothing skipped
    # the next epoch: what a fresh run of the new world sees in that epoch
    following = [_take(loader, None) for loader in after]
    if kind in ("sequential", "seedable", "custom"):
        fresh = _world(resumed, kind, batch_size, drop_last, **options)
        for loader in fresh:
            loader.set_epoch(state["epoch"] + 1)
        assert following == [_take(loader, None) for loader in fresh]
    else:  # the ranks still agree on one permutation: each sample once (plus padding)
        flat = _dealt(following)
        assert set(flat) == set(range(SIZE)) or drop_last


def test_a_state_saved_mid_resumed_pass_carries_its_start():
    """Saved again inside a pass resumed mid-round (1 -> 2 -> 4 -> 2 -> 1): the chain still
    sees every sample of the epoch once."""
    seen = []
    worlds = [1, 2, 4, 2, 1]
    state = None
    for index, world in enumerate(worlds):
        ranks = _world(world, "seedable", even_batches=False)
        if state is not None:
            for loader in ranks:
                loader.load_state_dict(state)
        last = index == len(worlds) - 1
        taken = [_take(loader, None if last else 1 + index % 2) for loader in ranks]
        seen += _dealt(taken)
        state = json.loads(json.dumps(ranks[0].state_dict()))
    assert sorted(seen) == list(range(SIZE))
    assert state == {"epoch": 1, "batches_yielded": 0, "sampler_seed": 11}


def test_loaded_but_not_iterated_state_is_saved_as_loaded():
    before = _world(1, "shuffle")[0]
    _take(before, 3)
    state = before.state_dict()
    after = _world(2, "shuffle")
    after[0].load_state_dict(state)  # 3 batches: one round of 2 processes, then one batch
    again = after[0].state_dict()
    assert again["source_batches"] == 3 and again["sampler_draw"] == state["sampler_draw"]
    assert again["batches_yielded"] == 1 and again["num_processes"] == 2


def test_state_of_accel_data_0_2_0_resumes_as_before():
    """No ``source_batches`` (saved by accel-data 0.2.0): the per-process count is taken."""
    loader = _world(2, "sequential")[0]
    loader.load_state_dict({"epoch": 0, "batches_yielded": 2})
    assert _take(loader, 1) == [[8, 9]]


def test_iterable_dataset_resumes_over_another_world_with_a_warning():
    """An iterable dataset is re-read and its items dealt anew; exact only if it yields the
    same items again, which accel cannot know: it says so (checked in ``_check``)."""
    _check("stream", 2, 4, 1, known_order=False)
    _check("stream", 1, 2, 3, known_order=False)
    _check("stream", 4, 2, 1, known_order=False, drop_last=True)


def test_iterable_with_persistent_workers_cannot_start_mid_round_and_names_the_repeats():
    before = _world(1, "stream")[0]
    _take(before, 3)
    state = before.state_dict()
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(Stream(), batch_size=2, num_workers=1,
                                            persistent_workers=True),
                                 num_processes=2, process_index=0)
    with pytest.warns(UserWarning) as record:
        loader.load_state_dict(state)
    messages = [str(w.message) for w in record]
    assert any("batches 2 to 2 of the epoch are seen again" in m for m in messages), messages
    assert any("IterableDataset Stream yields its items" in m for m in messages), messages
    assert _take(loader, 1) == [[4, 5]]  # the round of user batches 2 and 3: 2 again


def test_bad_position_is_refused_and_changes_nothing():
    loader = _world(2, "sequential")[0]
    _take(loader, 2)
    state = loader.state_dict()
    for bad in ({"source_batches": "x"}, {"source_batches": -2},
                {"source_batches": 2, "num_processes": 0}):
        with pytest.raises(ConfigurationError, match="Not a dataloader state"):
            loader.load_state_dict({"epoch": 0, "batches_yielded": 1, **bad})
        assert loader.state_dict() == state


@pytest.mark.parametrize("data", ["map", "stream"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_dispatcher_reads_the_rest_of_the_epoch_from_any_position(data, world):
    """Rank 0's reading plan (no process group needed to read it): the global batches it
    would send after a position saved by one process, padded from the epoch's start."""
    for consumed in range(SIZE // 2 + 1):
        torch.manual_seed(0)
        source = list(range(SIZE)) if data == "map" else Stream()
        loader = DataLoaderDispatcher(source, batch_size=2, num_processes=world,
                                      process_index=0)
        if consumed:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the iterable's "same order again" note
                loader.load_state_dict({"epoch": 0, "batches_yielded": consumed,
                                        "num_processes": 1, "source_batches": consumed})
        steps = len(loader)
        plan = list(loader._plan(loader._pending_skip()))
        sent = [x for parts, _ in plan for part in parts for x in part.tolist()]
        rest = list(range(2 * consumed, SIZE))
        assert sent[:len(rest)] == rest, consumed
        assert sent[len(rest):] == list(range(len(sent) - len(rest))), consumed  # padding
        assert steps == len(plan), consumed  # len() knew the resumed pass


def test_torchdata_state_mid_epoch_is_refused_on_another_world_and_changes_nothing():
    pytest.importorskip("torchdata")
    saved = prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=2),
                                num_processes=2, process_index=0,
                                use_stateful_dataloader=True)
    _take(saved, 2)
    state = saved.state_dict()
    loader = prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=2),
                                 use_stateful_dataloader=True)
    before = loader.state_dict()
    with pytest.raises(ConfigurationError, match="num_processes=2 \\(now 1\\).*"
                       "use_stateful_dataloader=False"):
        loader.load_state_dict(state)
    assert loader.state_dict() == before
    plain = prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=2))
    plain.load_state_dict(state)  # the fix the message names: accel's own position
    assert _take(plain, 1) == [[8, 9]]


def test_a_resumed_pass_with_nothing_left_for_the_new_world_still_ends_the_epoch():
    """One batch consumed of four, resumed by 4 processes with drop_last: no complete round
    is left, the pass yields nothing, and the next pass is the next epoch (not a repeat)."""
    def loader(world):
        return prepare_data_loader(DataLoader(list(range(8)), batch_size=2, drop_last=True),
                                   num_processes=world, process_index=0)

    saved = loader(1)
    _take(saved, 1)
    resumed = loader(4)
    resumed.load_state_dict(saved.state_dict())
    assert _take(resumed, None) == [] and resumed.iteration == 1
    assert _take(resumed, None) == [[0, 1]]  # epoch 1, whole

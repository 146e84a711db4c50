"""Resuming mid-epoch with another batch size or ``split_batches``, with simulated ranks in
one process (as ``test_world_resume.py``).

A run of N ranks with batch size B consumes ``k`` batches each; rank 0's ``state_dict()``
is loaded into the M ranks of a new world with batch size B'. Where the consumed samples
fill whole batches of B' the new world continues after exactly those samples; otherwise
it continues at the batch before, repeats the samples in between (never skips one) and
warns with the counts. The reference order of the rest of the epoch is what one process
with the saved batch size resumed from the same state yields (it only skips batches).
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

SIZE = 96  # every batch size used here divides 96: only the resume point decides


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(SIZE))

    def __len__(self) -> int:
        return SIZE


class Reversed(BatchSampler):
    """A batch sampler of the user's own class whose order accel cannot see."""

    def __iter__(self):
        batch = []
        for index in reversed(list(self.sampler)):
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch


def _loader(kind: str, batch_size: int | None, drop_last: bool = False) -> DataLoader:
    data = list(range(SIZE))
    if kind == "stream":
        return DataLoader(Stream(), batch_size=batch_size, drop_last=drop_last)
    if kind == "reversed":
        return DataLoader(data, batch_sampler=Reversed(SequentialSampler(data), batch_size,
                                                       drop_last))
    if kind == "items":
        return DataLoader(data, batch_size=None, shuffle=True)
    return DataLoader(data, batch_size=batch_size, shuffle=kind != "sequential",
                      drop_last=drop_last)


def _world(world: int, kind: str, batch_size: int | None, drop_last: bool = False,
           **options):
    if kind == "seedable":
        options.update(use_seedable_sampler=True, data_seed=11)
    options.setdefault("even_batches", False)
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
    return [_values(batch) for batch in itertools.islice(loader, count)]


def _dealt(per_rank: list[list[list[int]]]) -> list[int]:
    """The ranks' batches in the order Accelerate deals them: step by step, rank by rank."""
    flat = []
    for step in itertools.zip_longest(*per_rank):
        for batch in step:
            flat += batch or []
    return flat


def _resume(kind, saved, size, k, resumed, new_size, *, saved_options=None, options=None,
            drop_last=False, new_drop_last=None):
    """``(samples seen before, the reference rest, what the new world dealt, len()s, the
    rest per rank, the state, the warnings)``."""
    saved_options, options = saved_options or {}, options or {}
    before = _world(saved, kind, size, drop_last, **saved_options)
    seen = _dealt([_take(loader, k) for loader in before])
    state = json.loads(json.dumps(before[0].state_dict()))  # as a checkpoint stores it
    one = _world(1, kind, size, drop_last)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's own (world-change) notes
        one.load_state_dict(state)
    reference = [x for batch in _take(one, None) for x in batch]
    new_drop_last = drop_last if new_drop_last is None else new_drop_last
    after = _world(resumed, kind, new_size, new_drop_last, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for loader in after:
            loader.load_state_dict(state)
    lengths = [len(loader) for loader in after]
    rest = [_take(loader, None) for loader in after]
    return seen, reference, _dealt(rest), lengths, rest, state, [str(w.message) for w in caught]


def _batch_warnings(messages: list[str]) -> list[str]:
    return [m for m in messages if "resumes with batch_size" in m]


@pytest.mark.parametrize("kind", ["sequential", "shuffle", "seedable", "stream"])
@pytest.mark.parametrize("size,k,new_size", [(8, 2, 16), (16, 2, 8), (8, 3, 12),
                                             (8, 3, 4), (6, 4, 8)])
@pytest.mark.parametrize("saved,resumed", [(1, 1), (2, 1), (1, 2), (2, 4)])
def test_a_new_batch_size_continues_after_exactly_the_samples_seen(kind, size, k, new_size,
                                                                  saved, resumed):
    """Where the consumed samples fill whole new batches: no warning, every sample of the
    epoch once (8 -> 16, 16 -> 8, and with a world-size change, 2 -> 1 among them)."""
    if (saved * k * size) % new_size:
        pytest.skip("not a whole number of new batches: see the inexact test")
    seen, reference, dealt, lengths, rest, state, messages = _resume(
        kind, saved, size, k, resumed, new_size)
    assert state["batch_size"] == size and state["source_batches"] == saved * k
    assert not _batch_warnings(messages), messages
    assert dealt == reference  # the rest of the epoch's order, dealt over the new world
    assert collections.Counter(seen + dealt) == collections.Counter(range(SIZE))
    assert lengths == [len(batches) for batches in rest]  # len() knew the resumed pass
    assert all(len(batch) == new_size for batches in rest for batch in batches)


@pytest.mark.parametrize("kind", ["sequential", "shuffle", "stream"])
@pytest.mark.parametrize("saved,resumed", [(1, 1), (2, 1), (1, 2)])
def test_an_inexact_batch_size_repeats_the_samples_between_and_says_how_many(kind, saved,
                                                                             resumed):
    """8 -> 12 after 10 batches (80 samples): it continues after 6 batches of 12 (72), so
    samples 72..79 are seen again, none is skipped, and one warning says so."""
    k = 10 // saved
    seen, reference, dealt, _, _, state, messages = _resume(kind, saved, 8, k, resumed, 12)
    assert state["source_batches"] == 10
    warned = _batch_warnings(messages)
    assert len(warned) == resumed and len(set(warned)) == 1, messages  # once per loader
    assert ("saved with batch_size=8 after 10 of its batches (80 samples)" in warned[0]
            and "resumes with batch_size=12" in warned[0]
            and "samples 72 to 79 of the epoch (8) are seen again" in warned[0]), warned
    order = seen + reference  # the epoch's order as it was drawn when saved
    assert dealt == order[72:]
    counts = collections.Counter(seen + dealt)
    assert sorted(counts) == list(range(SIZE))  # nothing skipped
    assert sorted(x for x, n in counts.items() if n == 2) == sorted(order[72:80])


def test_fewer_samples_than_one_new_batch_restart_the_same_permutation():
    """1 batch of 8 into batch size 12: nothing of it fills a new batch, so the pass starts
    over, but it is still the interrupted pass (its permutation, not a new draw)."""
    seen, reference, dealt, _, _, _, messages = _resume("shuffle", 1, 8, 1, 1, 12)
    assert len(_batch_warnings(messages)) == 1, messages
    assert dealt == seen + reference


def test_a_restarted_pass_saved_before_it_runs_still_restarts_that_permutation():
    """Saved again before iterating (no batch consumed yet), then loaded: still the
    interrupted pass's permutation, drawn from the saved generator state."""
    saved = _world(2, "shuffle", 8)
    seen = _dealt([_take(loader, 1) for loader in saved])  # 16 samples: no batch of 24
    state = saved[0].state_dict()
    first = _world(2, "shuffle", 24)
    with pytest.warns(UserWarning, match="samples 0 to 15 of the epoch"):
        first[0].load_state_dict(state)
    again = json.loads(json.dumps(first[0].state_dict()))
    assert again["source_batches"] == 0 and again["sampler_draw"] == state["sampler_draw"]
    torch.manual_seed(1)  # another generator state: the saved draw must win
    later = prepare_data_loader(_loader("shuffle", 24), num_processes=2, process_index=0,
                                even_batches=False)
    later.load_state_dict(again)
    assert _take(later, 1)[0][:16] == seen


@pytest.mark.parametrize("saved_split,new_split", [(False, True), (True, False)])
@pytest.mark.parametrize("size,new_size", [(8, 8), (4, 8), (8, 4), (8, 12)])
@pytest.mark.parametrize("saved,resumed", [(2, 2), (2, 4), (4, 2)])
def test_split_batches_toggled(saved_split, new_split, size, new_size, saved, resumed):
    """A source batch is ``batch_size`` consecutive samples, split or not: toggling
    ``split_batches`` is exact on its own, and with a batch size change follows its rule
    (split=False, 4 per process -> split=True, 8 cut in two keeps what each rank gets)."""
    k = 2
    consumed = k * (1 if saved_split else saved)
    seen, reference, dealt, lengths, rest, state, messages = _resume(
        "seedable", saved, size, k, resumed, new_size,
        saved_options={"split_batches": saved_split}, options={"split_batches": new_split})
    assert state["split_batches"] is saved_split and state["source_batches"] == consumed
    samples = consumed * size
    if samples % new_size:
        assert len(_batch_warnings(messages)) == resumed, messages  # once per loader
        assert dealt == (seen + reference)[samples // new_size * new_size:]
        return
    assert not _batch_warnings(messages), messages
    assert dealt == reference
    assert collections.Counter(seen + dealt) == collections.Counter(range(SIZE))
    assert lengths == [len(batches) for batches in rest]


@pytest.mark.parametrize("drop_last,new_drop_last", [(False, True), (True, False)])
def test_drop_last_toggled_changes_no_position(drop_last, new_drop_last):
    """Mid-epoch every consumed batch is a full one, with or without ``drop_last``: the
    position needs no conversion (only the end of the epoch differs)."""
    seen, reference, dealt, _, _, _, messages = _resume(
        "shuffle", 2, 5, 2, 1, 5, drop_last=drop_last, new_drop_last=new_drop_last)
    assert not messages, messages
    common = min(len(dealt), len(reference))  # one sample more or less at the very end
    assert dealt[:common] == reference[:common] and abs(len(dealt) - len(reference)) <= 1
    assert not set(seen) & set(dealt)  # nothing seen twice


def test_even_batches_padding_still_comes_from_the_epoch_start():
    seen, reference, dealt, lengths, rest, _, messages = _resume(
        "sequential", 2, 5, 3, 4, 10, saved_options={"even_batches": True},
        options={"even_batches": True})
    assert not _batch_warnings(messages)
    assert len({len(batches) for batches in rest}) == 1  # the ranks stay in lockstep
    assert dealt[:len(reference)] == reference == list(range(30, SIZE))
    assert dealt[len(reference):] == list(range(len(dealt) - len(reference)))


def test_an_item_loader_into_batches_and_back():
    """``batch_size=None`` (one item per batch): 12 items are 3 batches of 4, and back."""
    seen, reference, dealt, _, _, state, messages = _resume("items", 2, None, 6, 1, None)
    assert state["batch_size"] == 1 and not messages and dealt == reference
    before = _world(1, "items", None)[0]
    seen = _dealt([_take(before, 12)])
    after = _world(1, "shuffle", 4)[0]
    after.load_state_dict(before.state_dict())
    assert after.state_dict()["source_batches"] == 3
    rest = [x for batch in _take(after, 5) for x in batch]
    items = _world(1, "items", None)[0]
    items.load_state_dict(after.state_dict())  # 8 batches of 4 = 32 items
    assert items.state_dict()["source_batches"] == 32
    assert sorted(seen + rest + _dealt([_take(items, None)])) == list(range(SIZE))


def test_a_batch_sampler_of_the_users_own_class_warns_even_when_divisible():
    _, _, dealt, _, _, _, messages = _resume("reversed", 1, 8, 2, 1, 16)
    warned = _batch_warnings(messages)
    assert len(warned) == 1 and "batch sampler Reversed yields consecutive" in warned[0], \
        messages
    assert dealt == list(range(SIZE - 17, -1, -1))  # converted all the same


def test_a_batch_sampler_without_a_size_warns_that_the_samples_are_unknown():
    data = list(range(SIZE))
    saved = prepare_data_loader(DataLoader(data, batch_sampler=[[i] for i in range(SIZE)]))
    _take(saved, 5)
    state = saved.state_dict()
    assert state["batch_size"] is None
    loader = prepare_data_loader(DataLoader(data, batch_size=4))
    with pytest.warns(UserWarning, match="batch_size=None after 5 of its batches.*"
                      "resumes with batch_size=4.*samples consumed are unknown"):
        loader.load_state_dict(state)
    assert _take(loader, 1) == [[20, 21, 22, 23]]  # the batch count, as before


def test_dispatcher_reads_the_rest_after_the_converted_position():
    """Rank 0's reading plan (no process group needed to read it)."""
    torch.manual_seed(0)
    loader = DataLoaderDispatcher(list(range(SIZE)), batch_size=12, num_processes=2,
                                  process_index=0, even_batches=False)
    assert loader.state_dict() == {"epoch": 0, "batches_yielded": 0}
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3, "num_processes": 2,
                            "source_batches": 6, "batch_size": 8, "split_batches": False})
    plan = list(loader._plan(loader._pending_skip()))
    sent = [x for parts, _ in plan for part in parts for x in part.tolist()]
    assert sent == list(range(48, SIZE))
    assert loader.state_dict()["source_batches"] == 4


def test_state_of_accel_data_0_2_1_loads_as_before_without_a_warning():
    """No ``batch_size`` (saved by accel-data <= 0.2.2 before it was recorded): the saved
    count is taken in this loader's batches, as before."""
    loader = _world(1, "sequential", 16)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.load_state_dict({"epoch": 0, "batches_yielded": 2, "num_processes": 1,
                                "source_batches": 2})
    assert _take(loader, 1) == [list(range(32, 48))]


def test_a_loaded_state_saved_again_before_iterating_is_the_converted_position():
    loader = _world(1, "sequential", 8)[0]
    _take(loader, 4)
    resumed = _world(1, "sequential", 16)[0]
    resumed.load_state_dict(loader.state_dict())
    again = resumed.state_dict()
    assert (again["source_batches"], again["batch_size"], again["batches_yielded"]) == (2, 16, 2)


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"batch_size": "8"}, {"batch_size": True},
                                 {"split_batches": "no"}, {"batch_size": -4}])
def test_a_garbled_batch_size_is_refused_and_changes_nothing(bad):
    loader = _world(2, "sequential", 8)[0]
    _take(loader, 2)
    state = loader.state_dict()
    with pytest.raises(ConfigurationError, match="Not a dataloader state: batch_size="):
        loader.load_state_dict({**state, **bad})
    assert loader.state_dict() == state


@pytest.mark.parametrize("change", [{"batch_size": 16}, {"split_batches": True}])
def test_torchdata_state_mid_epoch_is_refused_with_another_batch_and_changes_nothing(change):
    pytest.importorskip("torchdata")

    def make(batch_size=8, split_batches=False):
        return prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=batch_size),
                                   num_processes=2, process_index=0,
                                   split_batches=split_batches, use_stateful_dataloader=True)

    saved = make()
    _take(saved, 2)
    state = saved.state_dict()
    loader = make(**change)
    before = loader.state_dict()
    key = next(iter(change))
    with pytest.raises(ConfigurationError, match=f"{key}=.* \\(now .*use_stateful_dataloader"
                       "=False"):
        loader.load_state_dict(state)
    assert loader.state_dict() == before
    plain = prepare_data_loader(DataLoader(list(range(SIZE)), batch_size=16),
                                num_processes=2, process_index=0)
    plain.load_state_dict(state)  # the fix the message names: accel's own position
    assert _take(plain, 1) == [list(range(32, 48))]  # 4 batches of 8 = 2 of 16 consumed

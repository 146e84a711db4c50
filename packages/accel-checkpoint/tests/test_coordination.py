"""The save rendezvous between ranks, with two threads standing for two ranks over one real
c10d store: a rank that reaches a sync point instead of the save lets the writer commit at
once, and the next save of the same path has both ranks again."""

from __future__ import annotations

import threading
import time
import warnings

import pytest
from accel_checkpoint.coordination import Peers, SaveRound, sync_point
from torch.distributed import HashStore


@pytest.fixture
def peers(monkeypatch):
    monkeypatch.setenv("ACCEL_CHECKPOINT_PEER_TIMEOUT", "30")
    store = HashStore()
    return Peers(0, 2, store), Peers(1, 2, store)


def _in_thread(fn):
    result: dict = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # surfaced by the test
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_a_rank_at_a_sync_point_lets_a_main_only_save_commit_at_once(peers, tmp_path):
    writer, other = peers
    final = tmp_path / "checkpoint"
    # rank 1 goes straight to load_state's sync point; rank 0 saves alone
    thread, result = _in_thread(lambda: sync_point("load_state", peers=other))
    start = time.monotonic()
    round_ = SaveRound(final, writer)
    with pytest.warns(UserWarning, match=r"saved .* alone: the other ranks went on without saving"):
        staging = round_.begin()
    assert time.monotonic() - start < 10  # not the 30 s peer timeout
    assert staging is not None and round_.solo
    assert thread.is_alive()  # rank 1 waits until the save is committed ...
    round_.finish()
    sync_point("load_state", peers=writer)  # ... and until rank 0 reaches the sync point
    thread.join(10)
    assert not thread.is_alive() and "error" not in result

    # the next save of the same path is made by both ranks together
    rounds = [SaveRound(final, writer), SaveRound(final, other)]
    assert rounds[0]._prefix == rounds[1]._prefix
    thread, result = _in_thread(rounds[1].begin)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rounds[0].begin() is not None and not rounds[0].solo
    thread.join(10)
    assert result.get("value") is not None


def test_a_sync_point_returns_when_the_writer_arrives(peers):
    writer, other = peers
    thread, result = _in_thread(lambda: sync_point("wait_for_everyone", peers=other))
    time.sleep(0.05)
    assert thread.is_alive()
    sync_point("wait_for_everyone", peers=writer)
    thread.join(10)
    assert not thread.is_alive() and "error" not in result


def test_a_save_every_rank_must_enter_fails_fast_when_one_went_on(peers, tmp_path):
    writer, other = peers
    thread, result = _in_thread(lambda: sync_point("load_state", peers=other))
    start = time.monotonic()
    assert not SaveRound(tmp_path / "sharded", writer).everyone_arrived()
    assert time.monotonic() - start < 10
    sync_point("load_state", peers=writer)
    thread.join(10)
    assert not thread.is_alive() and "error" not in result


def test_a_lagging_rank_does_not_skip_the_writers_next_save(peers, tmp_path, monkeypatch):
    """The writer reaches the sync point and starts its next (all-ranks) save while the other
    rank is still between two looks at the store: that save must wait for it, not count it
    absent (which left the other rank waiting for a save that never came)."""
    import accel_checkpoint.coordination as coordination

    writer, other = peers
    round_ = SaveRound(tmp_path / "next", writer)
    started: dict = {}
    real_sleep = time.sleep

    def writer_moves_on(seconds):
        if not started:
            sync_point("load_state", peers=writer)  # the writer arrives ...
            started["save"] = _in_thread(round_.begin)  # ... and begins its next save
            while writer.store.get("accel_checkpoint/pending/0").decode() != round_._prefix:
                real_sleep(0.001)
        real_sleep(seconds)

    monkeypatch.setattr(coordination.time, "sleep", writer_moves_on)
    sync_point("load_state", peers=other)
    assert started and not writer.store.check([f"{round_._prefix}/arrived/1"])
    monkeypatch.setattr(coordination.time, "sleep", real_sleep)
    joined = SaveRound(tmp_path / "next", other)
    assert joined._prefix == round_._prefix and joined.begin() is not None
    thread, result = started["save"]
    thread.join(10)
    assert "error" not in result and not round_.solo


@pytest.mark.parametrize("rank_1_first", [True, False])
def test_ranks_saving_paths_of_their_own_each_save_alone_at_once(peers, tmp_path,
                                                                  rank_1_first):
    # each rank saves into a folder of its own (Accelerate's per-process temporary folders):
    # whoever enters first, neither waits for a save the other never starts
    writer, other = peers
    mine, theirs = SaveRound(tmp_path / "a", writer), SaveRound(tmp_path / "b", other)
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = (theirs, mine) if rank_1_first else (mine, theirs)
        threads = [_in_thread(first.begin)]
        time.sleep(0.05)
        threads.append(_in_thread(second.begin))
        for thread, _ in threads:
            thread.join(10)
    assert time.monotonic() - start < 10  # not the 30 s peer timeout
    results = dict(zip((first, second), (r for _, r in threads), strict=True))
    assert results[mine]["value"] is not None and mine.solo and not mine.own
    assert results[theirs]["value"].parent == tmp_path and theirs.own and theirs.solo
    assert theirs.peers.is_writer and theirs.peers.store is None  # a one-process save
    texts = [str(w.message) for w in caught]
    assert any("Rank 1 saves" in t and "on its own: rank 0 was saving another path" in t
               for t in texts), texts
    assert not any("alone" in t for t in texts), texts  # the writer's save is not "alone"
    mine.finish()

"""The structural protocols sibling packages share (accel_state.protocols)."""

from __future__ import annotations

from accel_state import env
from accel_state.protocols import UNPICKLES_VALUES, RankCheckpointWriter, Stateful


class Writer:
    layout = "mine"
    unpickles = "never"

    def save(self, staging, objects, rank, world_size):
        return []

    def load(self, path, objects, rank, world_size):
        return None


class NoLoad:
    layout = "mine"
    unpickles = "never"

    def save(self, staging, objects, rank, world_size):
        return []


def test_a_rank_checkpoint_writer_is_recognised_by_its_shape():
    assert isinstance(Writer(), RankCheckpointWriter)
    assert not isinstance(NoLoad(), RankCheckpointWriter)
    assert not isinstance(Writer(), Stateful)
    assert UNPICKLES_VALUES == ("never", "restricted", "arbitrary")


def test_trusting_pickles_is_an_explicit_environment_switch(monkeypatch):
    monkeypatch.delenv("ACCEL_CHECKPOINT_TRUST_PICKLES", raising=False)
    assert env.CHECKPOINT_TRUST_PICKLES.get_bool(False) is False
    monkeypatch.setenv("ACCEL_CHECKPOINT_TRUST_PICKLES", "1")
    assert env.CHECKPOINT_TRUST_PICKLES.get_bool(False) is True

"""Checkpoint layouts: the registry, the one interface of the replicated and per-rank
layouts, and the pickle rule for writers that unpickle (DESIGN.md §5)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from accel_checkpoint import CheckpointError, CorruptCheckpointError
from accel_checkpoint.dcp_writer import DCPWriter
from accel_checkpoint.layouts import (
    CHECKPOINT_LAYOUTS,
    PerRankLayout,
    ReplicatedLayout,
    resolve_layout,
)
from accel_checkpoint.manifest import verify_checkpoint
from accel_checkpoint.per_rank import check_writer, load_rank_state, save_rank_state
from accel_state.errors import ConfigurationError
from checkpoint_writers import PickleWriter
from torch import nn


class Named:
    """A minimal writer for the registry (never saves)."""

    unpickles = "never"

    def __init__(self, layout: str = "test-named") -> None:
        self.layout = layout

    def save(self, staging, objects, rank, world_size):
        return []

    def load(self, path, objects, rank, world_size):
        return None


@pytest.fixture
def registry():
    CHECKPOINT_LAYOUTS._clear()
    yield CHECKPOINT_LAYOUTS
    CHECKPOINT_LAYOUTS._clear()


def model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def test_builtin_layouts_come_from_entry_points(registry):
    # accel-parallel, where installed, registers DeepSpeed's layout beside the built-ins
    assert set(registry.names()) - {"deepspeed"} == {"replicated", "sharded"}
    replicated, sharded = resolve_layout("replicated"), resolve_layout("Sharded")
    assert isinstance(replicated, ReplicatedLayout) and replicated.name == "replicated"
    assert isinstance(sharded, PerRankLayout) and isinstance(sharded.writer, DCPWriter)
    assert (sharded.name, sharded.unpickles) == ("sharded", "restricted")
    assert not sharded.full_state_on_every_rank and replicated.full_state_on_every_rank


def test_unknown_layout_lists_the_known_ones(registry):
    with pytest.raises(ConfigurationError, match="Unknown checkpoint layout 'shraded'. Did "
                                                 "you mean 'sharded'.*Available: (deepspeed, )?"
                                                 "replicated, sharded.*accel.checkpoint_layouts"):
        resolve_layout("shraded")
    with pytest.raises(ConfigurationError, match="is not a checkpoint layout.*replicated, "
                                                 "sharded"):
        resolve_layout(object())


def test_writers_resolve_by_object_class_or_registered_name(registry):
    writer = Named()
    assert resolve_layout(writer).writer is writer
    assert isinstance(resolve_layout(DCPWriter).writer, DCPWriter)
    registry.register("test-named", Named)
    assert resolve_layout("test-named").name == "test-named"
    assert "test-named" in registry.names()
    registry.register("test-other", Named())
    with pytest.raises(ConfigurationError, match="registered as 'test-other' says its name "
                                                 "is 'test-named'"):
        resolve_layout("test-other")


@pytest.mark.parametrize("layout, unpickles, problem", [
    ("replicated", "never", "not 'replicated'"),
    ("Has Space", "never", "not a usable layout name"),
    ("", "never", "not a usable layout name"),
    ("ok", "sometimes", "unpickles='sometimes'"),
])
def test_bad_writers_are_refused(layout, unpickles, problem):
    writer = Named(layout)
    writer.unpickles = unpickles
    with pytest.raises(CheckpointError, match=problem):
        check_writer(writer)
    with pytest.raises(CheckpointError, match="is not a RankCheckpointWriter"):
        check_writer(object())


def test_per_rank_layout_saves_synchronously_and_refuses_save_on_each_node(tmp_path):
    layout = resolve_layout("sharded")
    net = model()
    entries, weights = layout.save_entries([net])
    assert entries == [net] and weights == []
    assert layout.load_entry(net) is net
    with pytest.raises(ConfigurationError, match="save_on_each_node=True cannot be used with "
                                                 "the 'sharded' checkpoint layout"):
        layout.save(tmp_path / "a", {"model": net}, save_on_each_node=True)
    assert list(tmp_path.iterdir()) == []
    objects: dict[str, object] = {}
    with pytest.warns(UserWarning, match="saved synchronously"):
        path = layout.save(tmp_path / "b", objects, async_save=True, step=2,
                           prepare_dir=lambda staging: objects.update(model=net))
    assert verify_checkpoint(path).metadata["sharded_objects"] == {"model": "model"}
    fresh = model(seed=1)
    loaded = layout.load(path, {"model": fresh}, verify="background")
    assert loaded.step == 2 and loaded.verification is None
    assert torch.equal(fresh.weight, net.weight)
    full = layout.full_state_dict(net)
    assert full.keys() == net.state_dict().keys()


def test_replicated_layout_hooks_see_the_saved_state_dicts(tmp_path):
    layout = resolve_layout("replicated")
    net = model()
    entries, weights = layout.save_entries([net])
    assert entries is weights and torch.equal(entries[0]["weight"], net.weight)
    path = layout.save(tmp_path / "r", {"model": entries[0]}, rng=False)
    fresh = model(seed=1)
    layout.load(path, {"model": layout.load_entry(fresh)}, rng=False)
    assert torch.equal(fresh.weight, net.weight)


# -- the pickle rule --------------------------------------------------------------------------
@pytest.fixture
def pickled(tmp_path):
    net = model()
    path = save_rank_state(tmp_path / "ckpt", PickleWriter(), {"model": net}, step=1)
    return path, net


def test_a_writer_that_unpickles_needs_an_explicit_opt_in(pickled, monkeypatch):
    path, net = pickled
    assert verify_checkpoint(path).metadata["unpickles"] == "arbitrary"
    monkeypatch.delenv("ACCEL_CHECKPOINT_TRUST_PICKLES", raising=False)
    fresh, writer = model(seed=1), PickleWriter()
    with pytest.raises(CheckpointError, match="full unpickler.*trust_pickles=True.*"
                                              "ACCEL_CHECKPOINT_TRUST_PICKLES=1"):
        load_rank_state(path, writer, {"model": fresh})
    assert writer.loads == 0 and not torch.equal(fresh.weight, net.weight)
    load_rank_state(path, writer, {"model": fresh}, trust_pickles=True)
    assert writer.loads == 1 and torch.equal(fresh.weight, net.weight)
    monkeypatch.setenv("ACCEL_CHECKPOINT_TRUST_PICKLES", "1")
    load_rank_state(path, writer, {"model": model(seed=2)})
    assert writer.loads == 2
    with pytest.raises(CheckpointError, match="trust_pickles=True"):  # the argument wins
        load_rank_state(path, writer, {"model": model(seed=2)}, trust_pickles=False)


class _Boom:
    """Unpickling it would create a file: proves a swapped pickle never runs."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_trusted_pickles_are_read_only_after_their_bytes_match_the_manifest(pickled, tmp_path):
    path = pickled[0]
    marker = tmp_path / "pwned"
    (path / "rank0.pt").write_bytes(pickle.dumps(_Boom(str(marker))))
    writer = PickleWriter()
    with pytest.raises(CorruptCheckpointError) as info:
        load_rank_state(path, writer, {"model": model()}, trust_pickles=True)
    assert Path(info.value.path) == path / "rank0.pt"
    assert writer.loads == 0 and not marker.exists()


def test_trusted_pickles_refuse_files_the_manifest_does_not_list(pickled):
    path = pickled[0]
    (path / "rank1.pt").write_bytes(b"dropped in later")
    writer = PickleWriter()
    with pytest.raises(CheckpointError, match=r"does not list \(rank1.pt\)"):
        load_rank_state(path, writer, {"model": model()}, trust_pickles=True)
    assert writer.loads == 0


def test_restricted_writers_load_without_an_opt_in(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEL_CHECKPOINT_TRUST_PICKLES", raising=False)
    net = model()
    path = save_rank_state(tmp_path / "dcp", DCPWriter(), {"model": net})
    (path / "notes.txt").write_text("unlisted files do not matter to DCP")
    fresh = model(seed=1)
    load_rank_state(path, DCPWriter(), {"model": fresh})
    assert torch.equal(fresh.weight, net.weight)


# -- strict=False on a per-rank layout -----------------------------------------------------------
class Grown(nn.Module):
    """The saved net plus a layer the checkpoint does not have."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net, self.head = nn.Linear(4, 3), nn.Linear(3, 1)


def test_strict_false_loads_a_sharded_checkpoint_with_missing_and_unexpected_keys(tmp_path):
    """As Accelerate's load_state(strict=False) for models, in the same layout and across
    layouts: the keys both have load, the model's extra keys keep their values, the
    checkpoint's extra keys are ignored; strict=True refuses, nothing changed."""
    from accel_checkpoint import save_checkpoint
    from accel_checkpoint.across_layouts import load_across_layouts

    layout = resolve_layout("sharded")
    saved = Grown(seed=0)
    saved.extra = nn.Linear(2, 2)  # unexpected in the target
    sharded = layout.save(tmp_path / "s", {"model": saved}, rng=False)
    replicated = save_checkpoint(tmp_path / "r", {"model": saved}, rng=False)
    for path, load in ((sharded, layout.load), (replicated, load_across_layouts)):
        target = Grown(seed=1)
        target.tail = nn.Linear(1, 1)  # missing in the checkpoint
        before = {k: v.clone() for k, v in target.state_dict().items()}
        with pytest.raises(CheckpointError):
            load(path, {"model": layout.load_entry(target)}, rng=False)
        assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())
        load(path, {"model": layout.load_entry(target, strict=False)}, rng=False)
        assert torch.equal(target.net.weight, saved.net.weight)
        assert torch.equal(target.head.weight, saved.head.weight)
        assert torch.equal(target.tail.weight, before["tail.weight"])


def test_strict_false_with_a_writer_that_loads_only_strictly_is_refused(tmp_path):
    layout = PerRankLayout(PickleWriter())
    net = model()
    path = layout.save(tmp_path / "p", {"model": net}, rng=False)
    fresh = model(seed=1)
    with pytest.raises(CheckpointError, match=r"strict=False cannot load \['model'\].*"
                                              "PickleWriter.*loads_non_strict"):
        layout.load(path, {"model": layout.load_entry(fresh, strict=False)}, rng=False,
                    trust_pickles=True)
    assert not torch.equal(fresh.weight, net.weight)

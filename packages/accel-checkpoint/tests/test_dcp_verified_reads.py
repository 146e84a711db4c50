"""DCP reads only the bytes accel hash-checked: a ``.distcp`` file that changes AFTER the
verification pass (another process, a flaky disk) is refused when DCP reads it, and the
objects keep their state. One process; the hook between verification and reading wraps
the loaders' verification pass to damage the file once it has passed."""

from __future__ import annotations

import pickle

import pytest
import torch
from accel_checkpoint import CorruptCheckpointError, across_layouts, per_rank, sharded
from accel_checkpoint.across_layouts import load_across_layouts
from accel_checkpoint.dcp_io import VerifiedReader
from accel_checkpoint.manifest import read_manifest
from accel_checkpoint.merge import load_full_state_dict
from accel_checkpoint.sharded import load_sharded_state, save_sharded_state
from torch import nn

_SHARD = "__0_0.distcp"


def build(seed: int = 0) -> dict[str, object]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.ones(3, 16)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    return {"model": model, "optimizer": optimizer}


def snapshot(objects) -> dict[str, torch.Tensor]:
    out = {f"p/{k}": v.clone() for k, v in objects["model"].state_dict().items()}
    for index, values in objects["optimizer"].state_dict()["state"].items():
        out.update({f"o/{index}/{k}": v.clone() for k, v in values.items()})
    return out


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


def damage_weight(path, objects) -> None:
    """Flip one byte inside the saved bytes of the first layer's weight (a tensor value,
    not a zip header: torch.load would read it without noticing)."""
    file = path / _SHARD
    raw = bytearray(file.read_bytes())
    weight = objects["model"][0].weight.detach().contiguous().numpy().tobytes()
    where = raw.find(weight)
    assert where >= 0, "the weight's bytes are stored as they are"
    raw[where + len(weight) // 2] ^= 0xFF
    file.write_bytes(bytes(raw))


def damage_after(module, name, monkeypatch, path, objects) -> None:
    """Let ``module.name`` (a verification pass) pass, then damage the shard."""
    original = getattr(module, name)

    def then_damage(*args, **kwargs):
        result = original(*args, **kwargs)
        damage_weight(path, objects)
        return result

    monkeypatch.setattr(module, name, then_damage)


@pytest.fixture
def saved(tmp_path):
    objects = build()
    return save_sharded_state(tmp_path / "ckpt", objects), objects


def test_a_shard_changed_after_verification_is_refused_and_nothing_changes(saved,
                                                                           monkeypatch):
    path, objects = saved
    target = build(seed=1)
    before = snapshot(target)
    damage_after(per_rank, "_check_share", monkeypatch, path, objects)
    with pytest.raises(CorruptCheckpointError, match=r"__0_0\.distcp.*xxh3-128 of chunk 0"):
        load_sharded_state(path, target)
    assert same(snapshot(target), before)


def test_across_layouts_reads_only_checked_bytes(saved, monkeypatch):
    path, objects = saved
    target = build(seed=1)
    before = snapshot(target)
    damage_after(across_layouts, "_check_share", monkeypatch, path, objects)
    with pytest.raises(CorruptCheckpointError, match=r"__0_0\.distcp"):
        load_across_layouts(path, target, rng=False)
    assert same(snapshot(target), before)


def test_merge_reads_only_checked_bytes(saved, monkeypatch):
    path, objects = saved
    assert torch.equal(load_full_state_dict(path)["0.weight"], objects["model"][0].weight)
    damage_after(sharded, "read_sharded_manifest", monkeypatch, path, objects)
    with pytest.raises(CorruptCheckpointError, match=r"__0_0\.distcp"):
        load_full_state_dict(path)


def test_a_shard_the_manifest_does_not_list_is_never_opened(saved):
    path, objects = saved
    files = dict(read_manifest(path).files)
    del files[_SHARD]
    state: dict[str, object] = {}
    from accel_checkpoint.dcp_io import DCP_METADATA_NAME, SafeFullLoadPlanner
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    reader = VerifiedReader(path, files[DCP_METADATA_NAME], files=files)
    with pytest.raises(CheckpointException, match="not listed in the manifest"):
        _load_state_dict(state, storage_reader=reader, planner=SafeFullLoadPlanner(),
                         no_dist=True)


def test_corrupt_checkpoint_errors_cross_processes_whole():
    error = pickle.loads(pickle.dumps(CorruptCheckpointError("/ckpt/a.distcp", "bad")))
    assert isinstance(error, CorruptCheckpointError)
    assert (error.path, error.problem) == ("/ckpt/a.distcp", "bad")


def test_shards_are_read_into_fresh_huge_page_memory(tmp_path):
    from accel_checkpoint.filebytes import huge_page_buffer, read_file

    (tmp_path / "a").write_bytes(bytes(range(256)) * 4099)
    (tmp_path / "empty").write_bytes(b"")
    assert bytes(read_file(tmp_path / "a", huge_page_buffer)) == (tmp_path / "a").read_bytes()
    assert bytes(read_file(tmp_path / "empty", huge_page_buffer)) == b""

"""save_sharded_state's prepare_dir, on_commit, replicated= and rng=, in one process.

The 2-process run through the Accelerator is tests/integration/test_checkpoint_sharded_facade.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from accel_checkpoint import CheckpointError, CorruptCheckpointError
from accel_checkpoint.manifest import verify_checkpoint
from accel_checkpoint.sharded import load_sharded_state, save_sharded_state


class Tracker:
    """State whose keys grow with use: DCP would only fill the keys a fresh one has."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def state_dict(self):
        return {"seen": dict(self.seen), "best": torch.tensor([float(len(self.seen))])}

    def load_state_dict(self, state):
        self.seen = dict(state["seen"])


def build(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def write_extras(staging: Path) -> None:
    (staging / "unet").mkdir()
    (staging / "unet" / "config.json").write_text(json.dumps({"layers": 2}))
    (staging / "note.txt").write_text("hello")


def test_prepare_dir_replicated_rng_and_on_commit(tmp_path):
    model, optimizer, scheduler = build()
    tracker = Tracker()
    tracker.seen = {"a": 1, "b": 2}
    committed = []
    torch.manual_seed(77)
    path = save_sharded_state(tmp_path / "ckpt", {"model": model, "optimizer": optimizer},
                              replicated={"scheduler": scheduler, "tracker": tracker},
                              rng=True, step=3, prepare_dir=write_extras,
                              on_commit=committed.append)
    after_save = torch.rand(3)
    assert committed == [path] == [tmp_path / "ckpt"]
    manifest = verify_checkpoint(path, deep=True)
    assert {"unet/config.json", "note.txt", "random_states_0.safetensors",
            "scheduler.json", "tracker.json", "tracker.safetensors"} <= set(manifest.files)
    assert manifest.objects["random_states_0"]["rank"] == 0 and manifest.ranks == [0]
    assert (path / "unet" / "config.json").is_file()

    model2, optimizer2, scheduler2 = build(seed=1)
    tracker2 = Tracker()
    torch.manual_seed(5)
    loaded = load_sharded_state(path, {"model": model2, "optimizer": optimizer2},
                                replicated={"scheduler": scheduler2, "tracker": tracker2},
                                rng=True)
    assert loaded.step == 3 and tracker2.seen == {"a": 1, "b": 2}
    assert scheduler2.state_dict() == scheduler.state_dict()
    assert torch.equal(torch.rand(3), after_save)  # this rank's RNG came back
    pairs = zip(model.parameters(), model2.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_files_of_prepare_dir_and_rng_are_hash_checked(tmp_path):
    model = build()[0]
    path = save_sharded_state(tmp_path / "ckpt", {"model": model}, rng=True,
                              prepare_dir=write_extras)
    (path / "unet" / "config.json").write_text(json.dumps({"layers": 3}))
    with pytest.raises(CorruptCheckpointError) as info:
        load_sharded_state(path, {"model": model})
    assert Path(info.value.path) == path / "unet" / "config.json"
    path = save_sharded_state(tmp_path / "other", {"model": model}, rng=True)
    victim = path / "random_states_0.safetensors"
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0x01
    victim.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError) as info:
        load_sharded_state(path, {"model": model}, rng=True)
    assert Path(info.value.path) == victim


def test_failures_commit_nothing_and_name_the_cause(tmp_path):
    model = build()[0]

    def broken(staging: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(CheckpointError, match="nothing was committed: rank 0: prepare_dir "
                                              "raised OSError: disk full"):
        save_sharded_state(tmp_path / "a", {"model": model}, prepare_dir=broken)
    with pytest.raises(CheckpointError, match=r"prepare_dir wrote \['_data.json'\]"):
        save_sharded_state(tmp_path / "b", {"model": model}, data={"x": 1},
                           prepare_dir=lambda d: (d / "_data.json").write_text("{}"))
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no staging directory

    def rotate(path: Path) -> None:
        raise PermissionError("read-only")

    with pytest.raises(CheckpointError, match="was committed, but on_commit failed on rank 0: "
                                              "PermissionError: read-only"):
        save_sharded_state(tmp_path / "c", {"model": model}, on_commit=rotate)
    verify_checkpoint(tmp_path / "c", deep=True)


def test_replicated_names_and_objects_are_checked(tmp_path):
    model, optimizer, scheduler = build()
    with pytest.raises(CheckpointError, match=r"\['model'\] given both"):
        save_sharded_state(tmp_path / "a", {"model": model}, replicated={"model": scheduler})
    with pytest.raises(CheckpointError, match=r"replicated= entries \['x'\]"):
        save_sharded_state(tmp_path / "a", {"model": model}, replicated={"x": object()})
    path = save_sharded_state(tmp_path / "b", {"model": model})
    with pytest.raises(CheckpointError, match=r"no object\(s\) \['scheduler'\]"):
        load_sharded_state(path, {"model": model}, replicated={"scheduler": scheduler})
    with pytest.warns(UserWarning, match="no RNG state for rank 0"):
        load_sharded_state(path, {"model": model}, rng=True)

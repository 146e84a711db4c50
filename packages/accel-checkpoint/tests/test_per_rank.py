"""The per-rank protocol with a RankCheckpointWriter of the test's own, in one process
(world size 1 runs the same code path, without a process group).

The 2-process run is tests/integration/test_checkpoint_per_rank.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from accel_checkpoint import CheckpointError, CorruptCheckpointError
from accel_checkpoint.manifest import verify_checkpoint
from accel_checkpoint.per_rank import load_rank_state, save_rank_state
from accel_checkpoint.sharded import save_sharded_state
from accel_checkpoint.tree import unflatten_state
from accel_state.protocols import RankCheckpointWriter
from checkpoint_writers import SafetensorsWriter
from torch import nn


class ReportingWriter(SafetensorsWriter):
    """Writes its file, then reports ``extra`` too (or raises ``error``)."""

    def __init__(self, extra=(), error: Exception | None = None) -> None:
        super().__init__()
        self.extra, self.error = list(extra), error

    def save(self, staging: Path, objects, rank: int, world_size: int) -> list[str]:
        written = super().save(staging, objects, rank, world_size)
        if self.error is not None:
            raise self.error
        for name in self.extra:
            if not name.startswith(("/", "..", "ghost")):
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_text("x")
        return written + self.extra


def build(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def same_params(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.fixture
def saved(tmp_path):
    model, optimizer, scheduler = build()
    torch.manual_seed(77)
    path = save_rank_state(tmp_path / "ckpt", SafetensorsWriter(),
                           {"model": model, "optimizer": optimizer},
                           replicated={"scheduler": scheduler}, data={"epoch": 3}, step=7,
                           rng=True)
    return path, model, optimizer, scheduler, torch.rand(3)


def test_the_writer_is_a_rank_checkpoint_writer():
    assert isinstance(SafetensorsWriter(), RankCheckpointWriter)
    assert not isinstance(object(), RankCheckpointWriter)


def test_round_trip_through_a_custom_writer(saved):
    path, model, optimizer, scheduler, after_save = saved
    manifest = verify_checkpoint(path, deep=True)
    assert (manifest.layout, manifest.world_size, manifest.step) == ("test-safetensors", 1, 7)
    assert {"rank0.safetensors", "rank0.json", "scheduler.json", "_data.json",
            "random_states_0.safetensors"} <= set(manifest.files)
    assert manifest.metadata["sharded_objects"] == {"model": "model", "optimizer": "optimizer"}
    assert manifest.metadata["unpickles"] == "never"

    model2, optimizer2, scheduler2 = build(seed=1)
    writer = SafetensorsWriter()
    torch.manual_seed(5)
    loaded = load_rank_state(path, writer, {"model": model2, "optimizer": optimizer2},
                             replicated={"scheduler": scheduler2}, rng=True)
    assert (loaded.step, loaded.data, writer.loads) == (7, {"epoch": 3}, 1)
    assert torch.equal(torch.rand(3), after_save)  # this rank's RNG came back
    assert same_params(model, model2)
    assert scheduler2.state_dict() == scheduler.state_dict()
    for a, b in zip(optimizer.state.values(), optimizer2.state.values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_rank_file_is_refused_before_the_writer_reads(saved, damage):
    path = saved[0]
    victim = path / "rank0.safetensors"
    raw = bytearray(victim.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x01
        victim.write_bytes(bytes(raw))
    elif damage == "truncate":
        victim.write_bytes(bytes(raw[:-4]))
    else:
        victim.unlink()
    model = build(seed=1)[0]
    before = [p.detach().clone() for p in model.parameters()]
    writer = SafetensorsWriter()
    with pytest.raises(CorruptCheckpointError) as info:
        load_rank_state(path, writer, {"model": model})
    assert Path(info.value.path) == victim
    assert writer.loads == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_failing_writer_commits_nothing_and_keeps_the_previous_checkpoint(saved, tmp_path):
    path, model = saved[0], saved[1]
    with pytest.raises(CheckpointError, match="nothing was committed: rank 0: OSError: disk "
                                              "full"):
        save_rank_state(path, ReportingWriter(error=OSError("disk full")), {"model": model},
                        step=8)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging directory left
    assert verify_checkpoint(path, deep=True).step == 7  # the previous one, intact


@pytest.mark.parametrize("extra, problem", [
    (["/etc/hostname"], "relative to the staging directory"),
    (["../escape.bin"], "relative to the staging directory"),
    (["manifest.json"], "other than manifest.json"),
    (["ghost.bin"], "which it did not write"),
    (["scheduler.json"], "which the protocol writes for the replicated objects"),
])
def test_what_a_writer_reports_is_checked(tmp_path, extra, problem):
    model, _, scheduler = build()
    with pytest.raises(CheckpointError, match=problem):
        save_rank_state(tmp_path / "ckpt", ReportingWriter(extra), {"model": model},
                        replicated={"scheduler": scheduler})
    assert list(tmp_path.iterdir()) == []


def test_files_in_subdirectories_are_committed_and_verified(tmp_path):
    model = build()[0]
    path = save_rank_state(tmp_path / "ckpt", ReportingWriter(["meta/0/info.txt"]),
                           {"model": model})
    assert "meta/0/info.txt" in verify_checkpoint(path, deep=True).files
    (path / "meta" / "0" / "info.txt").write_text("y")
    with pytest.raises(CorruptCheckpointError, match="info.txt"):
        load_rank_state(path, SafetensorsWriter(), {"model": model})


def test_layout_and_objects_must_match(saved, tmp_path):
    path, model = saved[0], saved[1]
    sharded = save_sharded_state(tmp_path / "dcp", {"model": model})
    with pytest.raises(CheckpointError, match="is a 'sharded' checkpoint, not a "
                                              "test-safetensors one"):
        load_rank_state(sharded, SafetensorsWriter(), {"model": model})
    with pytest.raises(CheckpointError, match=r"no object\(s\) \['other'\]"):
        load_rank_state(path, SafetensorsWriter(), {"model": model, "other": build()[0]})
    with pytest.warns(UserWarning, match="keep their state"):
        load_rank_state(path, SafetensorsWriter(), {"model": model, "other": build()[0]},
                        strict=False)


def test_prepare_runs_after_the_checks_and_may_fill_the_objects(saved):
    path, model = saved[0], saved[1]
    fresh = build(seed=3)[0]
    objects: dict[str, nn.Module] = {}
    calls = []

    def prepare(checked: Path) -> None:
        calls.append(checked)
        objects["model"] = fresh

    load_rank_state(path, SafetensorsWriter(), objects, prepare=prepare)
    assert calls == [path] and same_params(model, fresh)


class CheckedReadsWriter(SafetensorsWriter):
    """Says ``reads_verified``: parses only the bytes the loader's ``read`` checked."""

    reads_verified = True

    def load(self, path: Path, objects, rank: int, world_size: int, *, read=None) -> None:
        from safetensors.torch import load as load_bytes

        self.loads += 1
        tensors = load_bytes(read(path / f"rank{rank}.safetensors"))
        skeleton = json.loads(read(path / f"rank{rank}.json"))
        state = unflatten_state(skeleton, tensors)
        for name, obj in objects.items():
            obj.load_state_dict(state[name])


def test_a_writer_that_reads_verified_parses_the_checked_bytes(saved, monkeypatch):
    """A file changed after the verification pass (another process, a flaky disk) is
    refused when the writer reads it, and nothing changes."""
    import accel_checkpoint.per_rank as per_rank

    path = saved[0]
    model = build(seed=1)[0]
    writer = CheckedReadsWriter()
    load_rank_state(path, writer, {"model": model})
    assert same_params(model, saved[1]) and writer.loads == 1

    victim, check = path / "rank0.safetensors", per_rank._check_share

    def check_then_damage(*args):
        found = check(*args)
        raw = bytearray(victim.read_bytes())
        raw[-3] ^= 0x01  # in the last tensor's values
        victim.write_bytes(bytes(raw))
        return found

    monkeypatch.setattr(per_rank, "_check_share", check_then_damage)
    fresh = build(seed=2)[0]
    before = [p.detach().clone() for p in fresh.parameters()]
    with pytest.raises(CorruptCheckpointError, match="rank0.safetensors.*xxh3-128"):
        load_rank_state(path, writer, {"model": fresh})
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.parameters(), strict=True))


def test_verified_reader_reads_only_listed_unchanged_files(saved):
    from accel_checkpoint.hashing import verified_reader

    path = saved[0]
    read = verified_reader(path, verify_checkpoint(path).files)
    assert read(path / "rank0.json") == (path / "rank0.json").read_bytes()
    (path / "extra.pt").write_bytes(b"x")
    with pytest.raises(CorruptCheckpointError, match="extra.pt: not listed in the manifest"):
        read(path / "extra.pt")
    with pytest.raises(CorruptCheckpointError, match="not listed"):
        read(path.parent / "elsewhere.pt")
    (path / "rank0.json").write_text("{}")
    with pytest.raises(CorruptCheckpointError, match="rank0.json: size is 2 bytes"):
        read(path / "rank0.json")

"""Accelerator.save_state / load_state in one process: no silent downgrade to Accelerate's
format, no save that deletes what it did not write, and refusals that say what to do."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from accel_checkpoint.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    CorruptCheckpointError,
)
from torch import nn

from accel import Accelerator
from accel.utils import ProjectConfiguration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accelerate_checkpoints"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


def _accelerate_objects():
    """The objects of the committed Accelerate fixtures (make_checkpoints.py)."""
    accelerator = Accelerator(cpu=True)
    models = [nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)), nn.Linear(2, 2)]
    optimizers = [torch.optim.AdamW(models[0].parameters(), lr=0.01),
                  torch.optim.SGD(models[1].parameters(), lr=0.1, momentum=0.9)]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=1, gamma=0.5)
    accelerator.register_for_checkpointing(Counter())
    *models, _ = accelerator.prepare(*models, scheduler)
    for optimizer in optimizers:
        accelerator.prepare(optimizer)
    return accelerator, models


def _saved(tmp_path: Path, name: str = "ckpt", seed: int = 0):
    torch.manual_seed(seed)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 2))
    return accelerator, model, Path(accelerator.save_state(tmp_path / name))


def _flip(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def test_accel_files_without_a_manifest_are_refused_not_loaded_as_accelerate(tmp_path):
    accelerator, model, path = _saved(tmp_path)
    (path / "manifest.json").unlink()
    _flip(path / "model.safetensors")  # without the manifest nothing would notice
    before = model.weight.detach().clone()
    with pytest.raises(CorruptCheckpointError, match=r"accel's own checkpoint files "
                       r"\(_data\.json.*neither as accel's nor as an Accelerate"):
        accelerator.load_state(path)
    assert torch.equal(model.weight, before)


@pytest.mark.parametrize("leftover", ["checkpoint_3.tmp-0123456789ab",
                                      "checkpoint_3.old-0123456789ab",
                                      "checkpoint_3.deleting-0123456789ab"])
@pytest.mark.parametrize("content", ["accel", "accelerate"])
def test_staging_and_parked_folders_are_never_loaded(tmp_path, leftover, content):
    if content == "accel":
        accelerator, _, path = _saved(tmp_path)
        shutil.copytree(path, tmp_path / leftover)
    else:
        accelerator, _ = _accelerate_objects()
        shutil.copytree(FIXTURES / "safetensors", tmp_path / leftover)
    why = {".tmp-": "staging folder of an interrupted save", ".old-": "parked",
           ".deleting-": "rotation was deleting"}[leftover[12:leftover.index("-") + 1]]
    with pytest.raises(CorruptCheckpointError, match=why):
        accelerator.load_state(tmp_path / leftover)


def test_accelerate_folders_keep_loading_with_a_hook_file_beside_them(tmp_path):
    path = shutil.copytree(FIXTURES / "safetensors", tmp_path / "ckpt")
    (path / "config.json").write_text("{}")  # e.g. a save hook's save_pretrained
    accelerator, models = _accelerate_objects()
    with pytest.warns(UserWarning, match="written by Hugging Face Accelerate"):
        accelerator.load_state(path)
    expected = torch.load(FIXTURES / "expected-safetensors-rank0.pt", weights_only=True)
    for model, state in zip(models, expected["models"], strict=True):
        torch.testing.assert_close(accelerator.unwrap_model(model).state_dict(), state)


def test_save_state_refuses_a_folder_of_other_files_and_keeps_them(tmp_path):
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(3, 2))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    (tmp_path / "run" / "results.csv").write_text("a,b\n")
    (tmp_path / "file").write_text("a file")
    with pytest.raises(CheckpointExistsError, match=r"notes\.txt, results\.csv"):
        accelerator.save_state(tmp_path / "run")
    with pytest.raises(FileExistsError, match="a file of that name exists"):
        accelerator.save_state(tmp_path / "file")
    with pytest.raises(CheckpointWriteError, match=r"file/ckpt: its folder .* cannot be written"):
        accelerator.save_state(tmp_path / "file" / "ckpt")
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "file").read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "run"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt", "results.csv"]
    path = accelerator.save_state(tmp_path / "ckpt")
    accelerator.save_state(path)  # an accel checkpoint is overwritten as before


def test_rotation_only_deletes_accel_checkpoints(tmp_path):
    config = ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True,
                                  total_limit=1)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(nn.Linear(3, 2))
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "checkpoint_7").mkdir()
    (checkpoints / "checkpoint_7" / "notes.txt").write_text("not a checkpoint")
    shutil.copytree(FIXTURES / "bin", checkpoints / "checkpoint_8")  # Accelerate's own
    for _ in range(3):
        accelerator.save_state()
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "checkpoint_2", "checkpoint_7", "checkpoint_8"]
    assert (checkpoints / "checkpoint_7" / "notes.txt").read_text() == "not a checkpoint"
    assert sorted(os.listdir(checkpoints / "checkpoint_8")) == sorted(
        os.listdir(FIXTURES / "bin"))


def test_a_refused_load_names_the_newest_good_checkpoint_beside_it(tmp_path):
    accelerator, _, older = _saved(tmp_path, "checkpoint_1")
    accelerator.save_state(tmp_path / "checkpoint_2")
    bad = Path(accelerator.save_state(tmp_path / "checkpoint_3"))
    _flip(bad / "model.safetensors")
    with pytest.raises(CorruptCheckpointError, match=r"model\.safetensors.*newest complete "
                       r"checkpoint beside it is .*checkpoint_2: load that one "
                       r"\(`accel checkpoint verify .*checkpoint_2`"):
        accelerator.load_state(bad)
    assert older.is_dir()


def test_a_refused_load_with_nothing_beside_it_names_the_verify_command(tmp_path):
    accelerator, _, path = _saved(tmp_path)
    _flip(path / "model.safetensors")
    with pytest.raises(CorruptCheckpointError, match=r"`accel checkpoint verify <path>`"):
        accelerator.load_state(path)


def test_a_missing_checkpoint_is_a_missing_path(tmp_path):
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(3, 2))
    with pytest.raises(CheckpointNotFoundError, match="no such checkpoint folder") as info:
        accelerator.load_state(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError)
    assert not isinstance(info.value, CorruptCheckpointError)


def test_a_refused_load_state_changes_nothing(tmp_path):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    first, second = accelerator.prepare(nn.Linear(3, 2), nn.Linear(2, 2))
    counter.n, accelerator.step = 5, 9
    path = accelerator.save_state(tmp_path / "ckpt")

    other = Accelerator(cpu=True)
    fresh_counter = Counter()
    other.register_for_checkpointing(fresh_counter)
    kept, wrong = other.prepare(nn.Linear(3, 2), nn.Linear(2, 4))  # the second does not fit
    before = {k: v.clone() for k, v in kept.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"nothing was loaded: model_1: shape mismatch"):
        other.load_state(path)
    assert all(torch.equal(before[k], v) for k, v in kept.state_dict().items())
    assert fresh_counter.n == 0 and other.step == 0


def test_a_refused_accelerate_load_changes_nothing():
    accelerator = Accelerator(cpu=True)
    models = [nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)), nn.Linear(2, 3)]
    optimizers = [torch.optim.AdamW(models[0].parameters(), lr=0.01),
                  torch.optim.SGD(models[1].parameters(), lr=0.1, momentum=0.9)]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=1, gamma=0.5)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    *models, scheduler = accelerator.prepare(*models, scheduler)
    for optimizer in optimizers:
        accelerator.prepare(optimizer)
    before = {k: v.clone() for k, v in models[0].state_dict().items()}
    with pytest.raises(CheckpointError, match=r"model_1: shape mismatch"):
        accelerator.load_state(FIXTURES / "safetensors")
    assert all(torch.equal(before[k], v) for k, v in models[0].state_dict().items())
    assert counter.n == 0 and scheduler.state_dict()["last_epoch"] == 0


def test_register_for_checkpointing_raises_valueerror_as_accelerate():
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match=r"Item at index 1, `object`"):
        accelerator.register_for_checkpointing(Counter(), object())


@pytest.mark.multiprocess
@pytest.mark.shared_launch("checkpoint_targets.py", "{out}")
def test_every_rank_refuses_a_bad_target_and_saving_goes_on(explain, shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"REFUSED rank={rank} kind=CheckpointExistsError kept=True" in proc.stdout, \
            explain(proc)
        assert f"UNWRITABLE rank={rank} named=True" in proc.stdout, explain(proc)
        assert f"AFTER rank={rank} loaded=True" in proc.stdout, explain(proc)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]

"""CheckpointManager from a plain PyTorch loop: exact resume, refusal of damaged
checkpoints, rotation, asynchronous saves, and the `accel checkpoint` verbs."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch
from accel_checkpoint import (
    CheckpointError,
    CheckpointManager,
    CorruptCheckpointError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from accel_checkpoint.cli import register
from accel_checkpoint.manifest import read_manifest
from torch import nn


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train(model, optimizer, scheduler, steps):
    for _ in range(steps):
        x = torch.randn(4, 8)  # draws from the global RNG, like dropout
        loss = model(x).pow(2).mean() + random.random() * 0
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _assert_same(a, b):
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka


def test_plain_loop_resumes_bit_for_bit(tmp_path):
    reference = _setup()
    torch.manual_seed(1)
    random.seed(1)
    _train(*reference, steps=6)

    first = _setup()
    torch.manual_seed(1)
    random.seed(1)
    _train(*first, steps=3)
    manager = CheckpointManager(tmp_path)
    names = ("model", "optimizer", "scheduler")
    manager.save(dict(zip(names, first)), step=3, data={"epoch": 0, "note": "mid"})
    torch.manual_seed(123)  # the restarted process starts from other RNG states
    random.seed(123)

    resumed = _setup(seed=5)
    loaded = manager.load(dict(zip(names, resumed)))
    assert loaded.step == 3 and loaded.data == {"epoch": 0, "note": "mid"}
    _train(*resumed, steps=3)
    _assert_same(reference[0], resumed[0])
    ref_opt, res_opt = reference[1].state_dict(), resumed[1].state_dict()
    for index, values in ref_opt["state"].items():
        for key, value in values.items():
            assert torch.equal(value, res_opt["state"][index][key]), (index, key)
    assert reference[2].state_dict() == resumed[2].state_dict()


def test_layout_is_manifest_safetensors_and_json_without_pickles(tmp_path):
    model, optimizer, scheduler = _setup()
    _train(model, optimizer, scheduler, 1)
    path = save_checkpoint(tmp_path / "ckpt", {"model": model, "optimizer": optimizer}, step=7)
    names = sorted(p.name for p in path.iterdir())
    assert names == ["manifest.json", "model.safetensors", "optimizer.json",
                     "optimizer.safetensors", "random_states_0.json",
                     "random_states_0.safetensors"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format_version"] == 4 and manifest["step"] == 7
    assert len(manifest["manifest_sha256"]) == 64
    assert manifest["world_size"] == 1 and "torch" in manifest["libraries"]
    assert set(manifest["files"]) == set(names) - {"manifest.json"}
    records = manifest["files"].values()
    assert all(f["algorithm"] == "xxh3-128" and "sha256" not in f and f["size"] > 0
               and len(f["xxh3_128_file"]) == 32 for f in records)  # the default digest
    assert all(len(f["xxh3_128"]) == -(-f["size"] // f["chunk_size"]) and
               all(len(c) == 32 for c in f["xxh3_128"]) for f in records)
    assert not list(tmp_path.glob("*.tmp-*"))


def test_sha256_digests_on_request_load_and_verify_with_sha256(tmp_path):
    from accel_checkpoint import digest_algorithm
    from accel_checkpoint.manifest import verify_checkpoint

    model, optimizer, scheduler = _setup()
    _train(model, optimizer, scheduler, 1)
    with digest_algorithm("sha256"):
        path = save_checkpoint(tmp_path / "ckpt", {"model": model}, step=2)
        pending = save_checkpoint(tmp_path / "async", {"model": model}, async_save=True)
    async_path = pending.wait()  # written on another thread: the choice travels with it
    for folder in (path, async_path):
        records = json.loads((folder / "manifest.json").read_text())["files"].values()
        assert all(f["algorithm"] == "sha256" and len(f["sha256"]) == 64
                   and len(f["chunks"]) == len(f["xxh3_128"]) for f in records)
    fresh = _setup()[0]
    load_checkpoint(path, {"model": fresh})
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                 model.state_dict().values()))
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-3] ^= 0x01
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="model.safetensors.*sha256 of chunk 0"):
        verify_checkpoint(path, deep=True)
    with pytest.raises(CheckpointError, match="'md5'.*xxh3-128"):
        with digest_algorithm("md5"):
            pass


def test_a_committed_format_3_sha256_checkpoint_still_loads_and_verifies(tmp_path):
    # written by accel-checkpoint 0.3.3 (sha256 records, format 3) before xxh3-128 became
    # the default: tests/data/format3_sha256 (see its make.py)
    import shutil

    from accel_checkpoint.manifest import verify_checkpoint

    source = Path(__file__).parent / "data" / "format3_sha256"
    path = tmp_path / "old"
    shutil.copytree(source, path, ignore=shutil.ignore_patterns("make.py"))
    assert json.loads((path / "manifest.json").read_text())["format_version"] == 3
    verify_checkpoint(path, deep=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loaded = load_checkpoint(path, {"model": model, "optimizer": optimizer}, rng=False)
    assert loaded.step == 5
    torch.testing.assert_close(model.weight, torch.arange(8.0).reshape(2, 4) / 10)
    assert optimizer.state_dict()["state"][0]["momentum_buffer"].shape == (2, 4)


def test_format_1_checkpoints_with_whole_file_sha256_still_load_and_verify(tmp_path):
    model, optimizer, scheduler = _setup()
    _train(model, optimizer, scheduler, 1)
    path = save_checkpoint(tmp_path / "ckpt", {"model": model}, step=3)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = 1
    del manifest["manifest_sha256"]  # written before manifests carried their own digest
    manifest["files"] = {name: {"size": rec["size"],
                                "sha256": hashlib.sha256((path / name).read_bytes()).hexdigest()}
                         for name, rec in manifest["files"].items()}
    (path / "manifest.json").write_text(json.dumps(manifest))
    fresh = _setup()[0]
    load_checkpoint(path, {"model": fresh})
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                 model.state_dict().values()))
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-3] ^= 0x01
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="model.safetensors.*sha256"):
        load_checkpoint(path, {"model": fresh})


def test_flipped_byte_is_refused_naming_the_file_and_nothing_changes(tmp_path, capsys):
    model, optimizer, scheduler = _setup()
    _train(model, optimizer, scheduler, 1)
    path = save_checkpoint(tmp_path / "ckpt", {"model": model, "optimizer": optimizer})
    target = path / "optimizer.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    fresh, fresh_opt, _ = _setup(seed=9)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(CorruptCheckpointError, match="optimizer.safetensors"):
        load_checkpoint(path, {"model": fresh, "optimizer": fresh_opt})
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())
    assert _cli("verify", str(path)) == 1
    assert "optimizer.safetensors" in capsys.readouterr().err


def test_partial_checkpoints_are_refused_and_latest_skips_them(tmp_path):
    model, _, _ = _setup()
    manager = CheckpointManager(tmp_path)
    good = manager.save({"model": model}, step=1)
    partial = manager.save({"model": model}, step=2)
    (partial / "manifest.json").unlink()  # as if the save died before its commit
    missing = manager.save({"model": model}, step=3)
    (missing / "model.safetensors").unlink()
    assert manager.latest() == good
    with pytest.raises(CorruptCheckpointError, match="manifest.json"):
        load_checkpoint(partial, {"model": model})
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        load_checkpoint(missing, {"model": model})
    statuses = {i.path.name: i.status for i in list_checkpoints(tmp_path)}
    assert statuses == {"checkpoint_1": "ok", "checkpoint_3": "corrupt"}  # no manifest: skipped
    shutil.copytree(good, tmp_path / "checkpoint_9.tmp-abc")
    (tmp_path / "checkpoint_9.tmp-abc" / "manifest.json").unlink()
    assert {i.path.name: i.status for i in list_checkpoints(tmp_path)}["checkpoint_9.tmp-abc"] \
        == "partial"


def test_rotation_keeps_newest_verified_and_never_touches_other_dirs(tmp_path):
    model, _, _ = _setup()
    (tmp_path / "logs").mkdir()
    (tmp_path / "checkpoint_0.tmp-dead").mkdir()  # left by a crashed save
    manager = CheckpointManager(tmp_path, total_limit=2)
    for step in range(5):
        manager.save({"model": model}, step=step)
    assert [p.name for p in manager.checkpoints()] == ["checkpoint_3", "checkpoint_4"]
    assert (tmp_path / "logs").is_dir() and (tmp_path / "checkpoint_0.tmp-dead").is_dir()
    with pytest.raises(CheckpointError, match="total_limit"):
        CheckpointManager(tmp_path, total_limit=0)


def test_async_save_snapshots_state_and_commits_in_background(tmp_path):
    model, optimizer, _ = _setup()
    manager = CheckpointManager(tmp_path)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    pending = manager.save({"model": model}, step=1, async_save=True)
    with torch.no_grad():  # training goes on while the files are written
        for p in model.parameters():
            p.add_(1.0)
    path = pending.wait()
    verify_checkpoint(path)
    fresh, _, _ = _setup(seed=3)
    manager.load({"model": fresh})
    assert all(torch.equal(expected[k], v) for k, v in fresh.state_dict().items())


def test_missing_object_and_bad_names_are_clear_errors(tmp_path):
    model, optimizer, _ = _setup()
    path = save_checkpoint(tmp_path / "c", {"model": model}, rng=False)
    with pytest.raises(CheckpointError, match="no object named 'optimizer'.*model"):
        load_checkpoint(path, {"model": model, "optimizer": optimizer})
    with pytest.warns(UserWarning, match="no RNG state"):
        load_checkpoint(path, {"model": model})
    with pytest.raises(CheckpointError, match="Invalid checkpoint object name"):
        save_checkpoint(tmp_path / "d", {"../evil": model})
    assert read_manifest(path).objects["model"]["tensors"] == "model.safetensors"


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="accel")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["checkpoint", *argv])
    return args.func(args)


def test_cli_verify_and_list(tmp_path, capsys):
    model, _, _ = _setup()
    manager = CheckpointManager(tmp_path)
    one = manager.save({"model": model}, step=1)
    assert _cli("verify", str(one)) == 0
    assert "OK" in capsys.readouterr().out
    (tmp_path / "checkpoint_2.tmp-x").mkdir()
    assert _cli("list", str(tmp_path)) == 1  # a partial one is present
    out = capsys.readouterr().out
    assert "ok" in out and "partial" in out and "checkpoint_1" in out


def test_full_verification_reads_each_file_through_the_mapping_it_checked(tmp_path,
                                                                          monkeypatch):
    """verify="full" maps every file once: the objects are read from the mappings whose
    bytes were just hashed (no second mapping, no second round of page faults), and the
    state still round-trips; verify="background" hashes through mappings of its own."""
    from accel_checkpoint import fileio, hashing

    model, optimizer, scheduler = _setup()
    _train(model, optimizer, scheduler, steps=2)
    names = ("model", "optimizer", "scheduler")
    manager = CheckpointManager(tmp_path)
    saved = manager.save(dict(zip(names, (model, optimizer, scheduler), strict=True)), step=2)
    mapped: list[str] = []
    real_map = hashing.map_file

    def counting_map(path):
        mapped.append(Path(path).name)
        return real_map(path)

    monkeypatch.setattr(hashing, "map_file", counting_map)
    monkeypatch.setattr(fileio, "map_file", counting_map)
    resumed = _setup(seed=5)
    manager.load(dict(zip(names, resumed, strict=True)))
    _assert_same(model, resumed[0])
    assert sorted(mapped) == sorted(set(mapped)), mapped  # each file mapped once
    assert "model.safetensors" in mapped  # copied into the model from the checked mapping
    assert "optimizer.safetensors" not in mapped  # read into memory: the optimizer keeps it

    mapped.clear()
    loaded = manager.load(dict(zip(names, _setup(seed=6), strict=True)), verify="background")
    loaded.verification.wait()
    assert mapped.count("model.safetensors") == 2  # read, then hashed apart
    assert saved is not None


def test_hashing_a_mapping_survives_a_kernel_without_populate_read(tmp_path, monkeypatch):
    """The chunks of a mapped file are prefaulted with MADV_POPULATE_READ before hashing;
    a kernel that refuses the advice (EINVAL before Linux 5.14) only loses the speed-up."""
    from accel_checkpoint import filebytes, hashing

    data = bytes(range(256)) * 300
    file = tmp_path / "blob"
    file.write_bytes(data)
    record = hashing.record_of(data, chunk_size=4096)
    hashing.check_bytes(file, filebytes.map_file(file), record)
    monkeypatch.setattr(filebytes, "_MADV_POPULATE_READ", 0x7FFF)  # refused by every kernel
    hashing.check_bytes(file, filebytes.map_file(file), record)
    broken = bytearray(data)
    broken[5000] ^= 1
    file.write_bytes(bytes(broken))
    with pytest.raises(CorruptCheckpointError, match="chunk 1"):
        hashing.check_bytes(file, filebytes.map_file(file), record)


def _mapped_files() -> str:
    import gc

    gc.collect()
    return Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize("verify", ["full", "background"])
def test_a_loaded_checkpoint_keeps_no_mapping_of_files_it_did_not_read(tmp_path, verify):
    """Files that were checked but not read (a prepare_dir's) are unmapped once loading is
    over, though the result is kept: an open mapping would pin the file's disk space after
    rotation deletes the checkpoint."""
    model = nn.Linear(4, 4)
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"model": model}, rng=False,
                    prepare_dir=lambda staging: (staging / "extra.bin").write_bytes(b"x" * 9000))
    loaded = load_checkpoint(path, {"model": nn.Linear(4, 4)}, rng=False, verify=verify)
    if loaded.verification is not None:
        loaded.verification.wait()
    mapped = _mapped_files()
    assert str(path / "extra.bin") not in mapped
    assert str(path / "model.safetensors") not in mapped  # copied into the model


def _open_files() -> list[str]:
    fds = Path("/proc/self/fd")
    found = []
    for fd in fds.iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return found


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize("verify", ["full", "background"])
def test_a_loaded_checkpoint_pins_no_file_once_it_is_deleted(tmp_path, verify):
    """The optimizer keeps the tensors it loads (torch does not copy them): they are copies,
    so once rotation deletes the checkpoint no deleted file stays mapped or open."""
    model = nn.Linear(64, 64)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"model": model, "optimizer": optimizer}, data={"t": torch.ones(3)})
    fresh = nn.Linear(64, 64)
    fresh_optimizer = torch.optim.Adam(fresh.parameters())
    loaded = load_checkpoint(path, {"model": fresh, "optimizer": fresh_optimizer},
                             verify=verify)
    if loaded.verification is not None:
        loaded.verification.wait()
    state = fresh_optimizer.state_dict()["state"][0]
    torch.testing.assert_close(state["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    shutil.rmtree(path)  # what total_limit's rotation does
    pinned = [line for line in _mapped_files().splitlines() if str(tmp_path) in line]
    assert pinned == [], pinned
    assert [f for f in _open_files() if str(tmp_path) in f] == []
    assert torch.equal(loaded.data["t"], torch.ones(3))  # what the caller kept still reads
    state["exp_avg"].add_(1.0)  # and the optimizer's state is its own to change

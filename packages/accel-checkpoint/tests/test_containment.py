"""A checkpoint only ever reads files inside its own folder: every index we read (the
manifest's files and objects, a sharded safetensors index, DCP metadata, DeepSpeed's
`latest`, an Accelerate folder) refuses names and symbolic links that leave it."""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from accel_checkpoint import CorruptCheckpointError, load_checkpoint, save_checkpoint
from accel_checkpoint.accelerate_format import read_accelerate_checkpoint
from accel_checkpoint.cli import register
from accel_checkpoint.containment import inside, name_problem
from accel_checkpoint.dcp_io import read_dcp_metadata
from accel_checkpoint.manifest import manifest_digest
from accel_checkpoint.merge_deepspeed import _locate
from accel_checkpoint.weights import checkpoint_files, load_model_weights, save_model_weights
from safetensors.torch import save_file
from torch import nn

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "accelerate_checkpoints"


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["checkpoint", *argv])
    return args.func(args)


def _objects(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def _reseal(path: Path, change) -> None:
    """Rewrite the manifest with ``change`` and a matching digest: a crafted checkpoint."""
    where = path / "manifest.json"
    manifest = json.loads(where.read_text())
    change(manifest)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    where.write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "sub/../../x.json",
                                  "C:/x.json", "a\\..\\b.json"])
def test_name_problems(name):
    assert name_problem(name) is not None
    assert name_problem("sub/model.safetensors") is None


@pytest.mark.parametrize("outside", ["../../etc/passwd", "/etc/passwd"])
def test_manifest_listing_a_file_outside_is_refused(tmp_path, capsys, outside):
    path = save_checkpoint(tmp_path / "ckpt", _objects())
    record = json.loads((path / "manifest.json").read_text())["files"]["scheduler.json"]
    _reseal(path, lambda m: m["files"].__setitem__(outside, record))
    with pytest.raises(CorruptCheckpointError, match="only reads files inside its own folder"):
        load_checkpoint(path, _objects(1))
    assert _cli("verify", str(path)) == 1
    assert outside in capsys.readouterr().err


def test_an_object_read_from_outside_the_folder_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", _objects())
    (tmp_path / "outside").mkdir()
    shutil.copy(path / "scheduler.json", tmp_path / "outside" / "scheduler.json")

    def change(m):
        m["files"]["../outside/scheduler.json"] = m["files"].pop("scheduler.json")
        m["objects"]["scheduler"]["json"] = "../outside/scheduler.json"
    _reseal(path, change)
    with pytest.raises(CorruptCheckpointError, match=r"'\.\./outside/scheduler\.json' climbs"):
        load_checkpoint(path, _objects(1))


def test_a_symlink_leaving_the_folder_is_refused_one_staying_inside_is_not(tmp_path, capsys):
    path = save_checkpoint(tmp_path / "ckpt", _objects())
    (path / "sub").mkdir()
    (path / "model.safetensors").rename(path / "sub" / "model.safetensors")
    (path / "model.safetensors").symlink_to("sub/model.safetensors")
    load_checkpoint(path, _objects(1))  # same bytes, inside the folder: fine
    shutil.copy(path / "sub" / "model.safetensors", tmp_path / "other_model.safetensors")
    (path / "model.safetensors").unlink()
    (path / "model.safetensors").symlink_to(tmp_path / "other_model.safetensors")
    with pytest.raises(CorruptCheckpointError, match="leads out of the checkpoint folder"):
        load_checkpoint(path, _objects(1))
    assert _cli("verify", str(path)) == 1
    assert "symbolic link" in capsys.readouterr().err


def test_a_symlinked_manifest_leaving_the_folder_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", _objects())
    (path / "manifest.json").rename(tmp_path / "manifest.json")
    (path / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(CorruptCheckpointError, match="leads out"):
        load_checkpoint(path, _objects(1))


def test_a_symlinked_checkpoint_folder_is_fine(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", _objects())
    (tmp_path / "latest").symlink_to(path)
    load_checkpoint(tmp_path / "latest", _objects(1))


@pytest.mark.parametrize("shard", ["../../etc/passwd", "/etc/passwd",
                                   "../other_model.safetensors"])
def test_sharded_index_naming_a_file_outside_is_refused(tmp_path, shard):
    model = nn.Linear(4, 3)
    save_model_weights(model.state_dict(), tmp_path / "out", max_shard_size=20)
    save_file(model.state_dict(), tmp_path / "other_model.safetensors")
    index_file = tmp_path / "out" / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    index["weight_map"]["bias"] = shard
    index_file.write_text(json.dumps(index))
    with pytest.raises(CorruptCheckpointError, match="only reads files inside"):
        checkpoint_files(tmp_path / "out")
    with pytest.raises(CorruptCheckpointError, match="model.safetensors.index.json"):
        load_model_weights(nn.Linear(4, 3), tmp_path / "out")


def test_weight_folders_may_link_into_a_hub_cache(tmp_path):
    """A Hugging Face hub snapshot links each file into ../../blobs: followed."""
    model = nn.Linear(4, 3)
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    save_file(model.state_dict(), blobs / "abc123")
    (snapshot / "model.safetensors").symlink_to("../../blobs/abc123")
    fresh = nn.Linear(4, 3)
    load_model_weights(fresh, snapshot, strict=True)
    assert torch.equal(fresh.weight, model.weight)


def test_dcp_metadata_naming_a_file_outside_is_refused(tmp_path):
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": nn.Linear(4, 3).state_dict()}, checkpoint_id=tmp_path / "bare")
    read_dcp_metadata(tmp_path / "bare" / ".metadata")  # as saved: fine
    meta_file = tmp_path / "bare" / ".metadata"
    metadata = pickle.loads(meta_file.read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = "../../etc/passwd"
    meta_file.write_bytes(pickle.dumps(metadata))
    with pytest.raises(CorruptCheckpointError, match=r"\.metadata: names '\.\./\.\./etc/passwd'"):
        read_dcp_metadata(meta_file)


def test_deepspeed_latest_naming_a_folder_outside_is_refused(tmp_path):
    for tag in ("global_step1", "global_step2"):
        (tmp_path / "ds" / tag).mkdir(parents=True)
        (tmp_path / "ds" / tag / "mp_rank_00_model_states.pt").write_bytes(b"")
    (tmp_path / "ds" / "latest").write_text("../../elsewhere")
    with pytest.raises(CorruptCheckpointError, match="latest: names '../../elsewhere'"):
        _locate(tmp_path / "ds", None)
    (tmp_path / "ds" / "latest").write_text("global_step2")
    assert _locate(tmp_path / "ds", None) == (tmp_path / "ds", "global_step2")


def test_an_accelerate_folder_with_a_symlink_out_is_refused(tmp_path):
    path = shutil.copytree(FIXTURES / "bin", tmp_path / "ckpt")
    shutil.move(path / "optimizer.bin", tmp_path / "optimizer.bin")
    (path / "optimizer.bin").symlink_to(tmp_path / "optimizer.bin")
    with pytest.raises(CorruptCheckpointError, match="optimizer.bin: leads out"):
        read_accelerate_checkpoint(path)


def test_inside_returns_the_path(tmp_path):
    assert inside(tmp_path, "a/b.json", tmp_path) == tmp_path / "a" / "b.json"

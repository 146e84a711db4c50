"""The manifest protects itself: any change to what manifest.json says is refused as
"manifest.json is corrupt" by loading and by `accel checkpoint verify`, before anything
in it is believed; manifests written before the self-digest (formats 1 and 2) still load."""

from __future__ import annotations

import argparse
import json
import random

import pytest
import torch
from accel_checkpoint import CorruptCheckpointError, load_checkpoint, save_checkpoint
from accel_checkpoint.cli import register
from accel_checkpoint.manifest import manifest_digest, read_manifest
from torch import nn


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["checkpoint", *argv])
    return args.func(args)


def _objects(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


@pytest.fixture
def checkpoint(tmp_path):
    return save_checkpoint(tmp_path / "ckpt", _objects(), data={"step": 5}, step=5,
                           metadata={"note": "x"})


def _refused(path, capsys) -> None:
    """Loading and `accel checkpoint verify` both refuse, naming manifest.json as corrupt."""
    with pytest.raises(CorruptCheckpointError, match="manifest.json is corrupt") as info:
        load_checkpoint(path, _objects(seed=1))
    assert info.value.path.endswith("manifest.json")
    assert _cli("verify", str(path)) == 1
    assert "manifest.json is corrupt" in capsys.readouterr().err


def test_every_single_byte_change_is_refused_or_changes_nothing(checkpoint, capsys):
    """300 seeded random single-byte changes anywhere in a real manifest. Each one is
    refused by load and by verify, or leaves the parsed content identical (whitespace
    between tokens: the digest covers what the manifest says, not its layout), in which
    case the checkpoint loads and verifies as before."""
    where = checkpoint / "manifest.json"
    original = where.read_bytes()
    content = json.loads(original)
    rng = random.Random(1234)
    refused = unchanged = 0
    for _ in range(300):
        at = rng.randrange(len(original))
        new = rng.choice([b for b in range(256) if b != original[at]])
        where.write_bytes(original[:at] + bytes([new]) + original[at + 1:])
        try:
            same = json.loads(where.read_bytes()) == content
        except ValueError:
            same = False
        if same:
            load_checkpoint(checkpoint, _objects(seed=1))
            assert _cli("verify", str(checkpoint)) == 0
            capsys.readouterr()
            unchanged += 1
        else:
            _refused(checkpoint, capsys)
            refused += 1
    where.write_bytes(original)
    assert refused > 250 and refused + unchanged == 300


@pytest.mark.parametrize("change", [
    lambda m: m.__setitem__("step", 6),
    lambda m: m.__setitem__("world_size", 2),
    lambda m: m.__setitem__("created_unix", m["created_unix"] + 1),
    lambda m: m["libraries"].__setitem__("torch", "0.0.1"),
    lambda m: m["objects"]["model"].__setitem__("kind", "data"),
    lambda m: m["files"]["model.safetensors"].__setitem__(
        "xxh3_128_file", m["files"]["model.safetensors"]["xxh3_128_file"][::-1]),
    lambda m: m["files"]["model.safetensors"]["xxh3_128"].__setitem__(0, "0" * 32),
    lambda m: m["files"]["model.safetensors"].__setitem__("algorithm", "sha256"),
    lambda m: m["files"].__setitem__("model.safetenqors", m["files"].pop("model.safetensors")),
    lambda m: m["objects"].pop("model"),
    lambda m: m.__setitem__("format_version", 2),  # posing as a manifest without a digest
    lambda m: m.pop("manifest_sha256"),  # a format-3 manifest must carry its digest
], ids=["step", "world_size", "created", "versions", "kind", "digest", "chunks", "algorithm",
        "name", "object", "older-version", "no-digest"])
def test_changed_fields_are_refused(checkpoint, capsys, change):
    where = checkpoint / "manifest.json"
    manifest = json.loads(where.read_text())
    change(manifest)
    where.write_text(json.dumps(manifest, indent=1))
    _refused(checkpoint, capsys)


def test_reformatted_manifest_with_the_same_content_loads(checkpoint):
    where = checkpoint / "manifest.json"
    where.write_text(json.dumps(json.loads(where.read_text()), indent=4, sort_keys=True))
    load_checkpoint(checkpoint, _objects(seed=1))
    assert _cli("verify", str(checkpoint)) == 0


def test_format_2_manifests_without_a_digest_still_load(checkpoint):
    """Written before the self-digest: accepted as they are (their files are still checked
    against their digests; the manifest itself is not protected)."""
    where = checkpoint / "manifest.json"
    manifest = json.loads(where.read_text())
    del manifest["manifest_sha256"]
    manifest["format_version"] = 2
    where.write_text(json.dumps(manifest, indent=1))
    fresh = _objects(seed=1)
    load_checkpoint(checkpoint, fresh)
    assert torch.equal(fresh["model"].weight, _objects()["model"].weight)
    assert read_manifest(checkpoint).format_version == 2
    assert _cli("verify", str(checkpoint)) == 0


def test_the_digest_is_over_the_canonical_content(checkpoint):
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    assert manifest["manifest_sha256"] == manifest_digest(body) == manifest_digest(manifest)
    reordered = dict(reversed(list(body.items())))
    assert manifest_digest(reordered) == manifest["manifest_sha256"]


def test_a_resealed_manifest_naming_an_unlisted_file_is_refused(checkpoint, capsys):
    where = checkpoint / "manifest.json"
    manifest = json.loads(where.read_text())
    manifest["objects"]["scheduler"]["json"] = "elsewhere.json"
    manifest["manifest_sha256"] = manifest_digest(manifest)
    where.write_text(json.dumps(manifest))
    _refused(checkpoint, capsys)


def test_verify_of_a_missing_folder_says_so(tmp_path, capsys):
    assert _cli("verify", str(tmp_path / "nope")) == 1
    assert "MISSING" in capsys.readouterr().err

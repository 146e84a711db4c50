"""Sharded (DCP) checkpoints of an FSDP2 model in 2 processes, then `accel merge-weights`.

One run (see scripts/checkpoint_sharded.py, in the launch it shares with other check scripts:
conftest's shared_launch): exact resume from a sharded checkpoint,
a corrupted shard refused on every rank naming the file, also when it is damaged after the
verification pass (no rank's model changes); then this process merges the
checkpoint with the CLI (no process group) and compares with the full state dict the run
gathered at save time.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.multiprocess



@pytest.mark.shared_launch("checkpoint_sharded.py", "{out}")
def test_fsdp2_sharded_resume_corruption_and_merge(explain, shared_launch, capsys):
    from accel_checkpoint.manifest import verify_checkpoint
    from accel_launch.cli import main
    from safetensors.torch import load_file

    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"SHARDED-RESUME rank={rank} exact=True lr=True" in proc.stdout, explain(proc)
        assert f"CORRUPT-REFUSED rank={rank} file=__1_0.distcp" in proc.stdout, explain(proc)
        assert (f"LATE-CORRUPT-REFUSED rank={rank} file=__1_0.distcp unchanged=True"
                in proc.stdout), explain(proc)

    sharded = tmp_path / "sharded"
    manifest = verify_checkpoint(sharded, deep=True)
    assert manifest.layout == "sharded" and manifest.world_size == 2 and manifest.step == 2
    assert {".metadata", "__0_0.distcp", "__1_0.distcp", "_data.json"} == set(manifest.files)
    assert manifest.metadata["sharded_objects"] == {"model": "model", "optimizer": "optimizer",
                                                    "scheduler": "stateful"}
    assert not list(tmp_path.glob("sharded.tmp-*"))  # the staging directory was renamed

    # `accel merge-weights` through the CLI's own main, in this process (needs no process
    # group: one interpreter less than `python -m accel_launch`)
    capsys.readouterr()
    code = main(["merge-weights", str(sharded), str(tmp_path / "merged")])
    merged = capsys.readouterr()
    assert code == 0, merged
    assert "model.safetensors" in merged.out, merged
    weights = load_file(tmp_path / "merged" / "model.safetensors")
    expected = load_file(tmp_path / "full_at_save.safetensors")
    assert sorted(weights) == sorted(expected) == json.loads(
        (tmp_path / "result.json").read_text())["keys"]
    for name, tensor in expected.items():
        assert weights[name].dtype == tensor.dtype and weights[name].equal(tensor), name
    assert sharded.is_dir()  # kept without --remove_checkpoint_dir

"""Accelerator.save_state/load_state with an FSDP2 model in 2 processes (sharded layout).

One run (see scripts/checkpoint_sharded_facade.py, in the launch it shares with other check
scripts: conftest's shared_launch): exact resume through the facade
with dropout, a shuffled dataloader, an LR scheduler and a registered object; a save
pre-hook's files committed; async_save warned and saved synchronously; rotation; an
unsharded model loads it (across layouts). Then this process checks the committed
checkpoint's manifest.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess



@pytest.mark.shared_launch("checkpoint_sharded_facade.py", "{out}")
def test_fsdp2_save_state_load_state(explain, shared_launch):
    from accel_checkpoint.manifest import verify_checkpoint

    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert (f"FACADE-RESUME rank={rank} exact=True state=True hook=True async_warned=True "
                "saved=checkpoint_1") in proc.stdout, explain(proc)
        assert f"UNSHARDED-LOADED rank={rank} equal=True" in proc.stdout, explain(proc)
    assert "MAIN-ONLY refused every_process=True left=[]" in proc.stdout, explain(proc)
    assert "SAVE-MODEL equal=True" in proc.stdout, explain(proc)

    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint_1"]  # rotated, no staging
    path = root / "checkpoint_1"
    manifest = verify_checkpoint(path, deep=True)  # every sha256, the hook's files included
    assert (manifest.layout, manifest.world_size, manifest.ranks, manifest.step) == (
        "sharded", 2, [0, 1], 6)
    assert manifest.metadata["sharded_objects"] == {"model": "model", "optimizer": "optimizer"}
    kinds = {name: entry["kind"] for name, entry in manifest.objects.items()}
    assert kinds == {"scheduler": "state", "dataloader": "state", "custom_checkpoint_0": "state",
                     "random_states_0": "rng", "random_states_1": "rng"}
    assert {"random_states_0.safetensors", "random_states_1.safetensors",
            "hook/extra_0.txt", "hook/extra_1.txt", "__0_0.distcp", "__1_0.distcp",
            ".metadata", "_data.json"} <= set(manifest.files)
    assert (path / "hook" / "extra_1.txt").read_text() == "rank 1"

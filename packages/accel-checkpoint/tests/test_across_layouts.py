"""load_across_layouts in one process, without the Accelerator: a sharded (DCP) checkpoint
into plain objects and a replicated one through the same loader, optimizer state equal;
refusals before anything changes. The 2-process FSDP2 <-> DDP runs are in
tests/integration/test_checkpoint_across_layouts.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel_checkpoint import CheckpointError, save_checkpoint
from accel_checkpoint.across_layouts import load_across_layouts, loads_across
from accel_checkpoint.sharded import save_sharded_state


def build(seed: int = 0, width: int = 8):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model(torch.ones(3, 4)).pow(2).mean().backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def state(objects) -> dict[str, torch.Tensor]:
    out = {f"p/{k}": v.clone() for k, v in objects["model"].state_dict().items()}
    for index, values in objects["optimizer"].state_dict()["state"].items():
        out.update({f"o/{index}/{k}": v.clone() for k, v in values.items()})
    out["lr"] = torch.tensor(objects["scheduler"].get_last_lr())
    return out


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


def test_which_pairs_load_across():
    assert loads_across("sharded", "replicated") and loads_across("replicated", "sharded")
    assert not loads_across("sharded", "sharded")
    assert not loads_across("engine-x", "replicated") and not loads_across("sharded", "x")


@pytest.mark.parametrize("layout", ["sharded", "replicated"])
def test_full_states_load_with_the_optimizer(tmp_path, layout):
    saved = build()
    save = save_sharded_state if layout == "sharded" else save_checkpoint
    path = save(tmp_path / "ckpt", saved, data={"step": 4}, step=4)
    target = build(seed=1)
    loaded = load_across_layouts(path, target, rng=False)
    assert same(state(target), state(saved))
    assert (loaded.manifest.layout, loaded.data, loaded.step) == (layout, {"step": 4}, 4)


def test_misfits_and_absent_objects_are_refused_before_anything_changes(tmp_path):
    path = save_sharded_state(tmp_path / "ckpt", build())
    wide = build(seed=1, width=16)
    kept = state(wide)
    with pytest.raises(CheckpointError, match="nothing was loaded.*shape mismatch"):
        load_across_layouts(path, wide, rng=False)
    assert same(state(wide), kept)
    grouped = build(seed=2)
    model = grouped["model"]
    grouped["optimizer"] = torch.optim.Adam([{"params": model[0].parameters()},
                                             {"params": model[2].parameters()}])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="optimizer: 1 parameter group"):
        load_across_layouts(path, grouped, rng=False)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    extra = build(seed=3)
    extra["other"] = build(seed=4)["scheduler"]
    kept = state(extra)
    with pytest.raises(CheckpointError, match=r"has no object\(s\) \['other'\]"):
        load_across_layouts(path, extra, rng=False)
    assert same(state(extra), kept)


def test_only_full_state_layouts_load_across(tmp_path):
    import json

    path = save_checkpoint(tmp_path / "ckpt", build())
    from accel_checkpoint.manifest import read_manifest

    manifest = read_manifest(path)
    manifest.layout = "engine-x"  # no writer registered under that name
    with pytest.raises(CheckpointError, match="'engine-x' checkpoint: only replicated and "
                                              "sharded"):
        load_across_layouts(path, build(seed=1), manifest=manifest)
    assert json.loads((path / "manifest.json").read_text())["layout"] == "replicated"


class _ReadingWriter:
    """A per-rank writer registered only to read its checkpoints whole (``full_states``):
    here it serves the states of a replicated checkpoint's files, by name."""

    layout = "engine-x"
    unpickles = "never"
    calls: list = []

    def save(self, staging, objects, rank, world_size):
        raise AssertionError("only read here")

    def load(self, path, objects, rank, world_size):
        raise AssertionError("only read here")

    def full_states(self, path, names, owners, listed, read):
        from accel_checkpoint.manager import read_object
        from accel_checkpoint.manifest import read_manifest

        assert "model.safetensors" in listed and callable(read)
        type(self).calls.append((sorted(names), dict(owners)))
        manifest = read_manifest(path)
        manifest.layout = "replicated"
        return {n: read_object(path, n, manifest) for n in names}


def test_a_registered_writer_with_full_states_loads_across(tmp_path):
    """A per-rank layout whose registered writer reads its states whole (DeepSpeed's, in
    accel-parallel) loads into full-state models; its refusals stay its own."""
    from accel_checkpoint.layouts import CHECKPOINT_LAYOUTS, registered_writer
    from accel_checkpoint.manifest import read_manifest
    from accel_checkpoint.rank_writers import OBJECTS_KEY

    CHECKPOINT_LAYOUTS.register("engine-x", _ReadingWriter)
    try:
        assert isinstance(registered_writer("engine-x"), _ReadingWriter)
        assert registered_writer("replicated") is None
        assert loads_across("engine-x", "replicated") and loads_across("engine-x", "sharded")
        assert not loads_across("replicated", "engine-x")
        saved = build()
        path = save_checkpoint(tmp_path / "ckpt", saved)
        manifest = read_manifest(path)
        manifest.layout = "engine-x"
        manifest.metadata[OBJECTS_KEY] = {"model": "model", "optimizer": "optimizer"}
        target = build(seed=1)
        load_across_layouts(path, target, rng=False, manifest=manifest)
        assert same(state(target), state(saved))
        assert _ReadingWriter.calls == [(["model", "optimizer"], {"optimizer": "model"})]
    finally:
        CHECKPOINT_LAYOUTS.unregister("engine-x")

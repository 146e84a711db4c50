"""Sharded (DCP) checkpoints and merge_fsdp_weights in one process (no process group).

The 2-process FSDP2 run is in tests/integration/test_checkpoint_sharded.py.
"""

from __future__ import annotations

import argparse
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from accel_checkpoint import CheckpointError, CorruptCheckpointError, save_checkpoint
from accel_checkpoint.cli_merge import register
from accel_checkpoint.merge import load_full_state_dict, merge_fsdp_weights
from accel_checkpoint.sharded import load_sharded_state, save_sharded_state


def build(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps: int = 2) -> None:
    for i in range(steps):
        x = torch.full((3, 4), float(i + 1))
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()


@pytest.fixture
def saved(tmp_path):
    model, optimizer, scheduler = build()
    train(model, optimizer, scheduler)
    path = save_sharded_state(tmp_path / "ckpt", {"model": model, "optimizer": optimizer,
                                                  "scheduler": scheduler},
                              data={"epoch": 7}, step=2)
    return path, model, optimizer, scheduler


def test_exact_resume_in_one_process(saved):
    path, model, optimizer, scheduler = saved
    assert sorted(os.listdir(path)) == [".metadata", "__0_0.distcp", "_data.json",
                                        "manifest.json"]
    train(model, optimizer, scheduler)
    model2, optimizer2, scheduler2 = build(seed=1)
    loaded = load_sharded_state(path, {"model": model2, "optimizer": optimizer2,
                                       "scheduler": scheduler2})
    assert (loaded.step, loaded.data, loaded.manifest.layout) == (2, {"epoch": 7}, "sharded")
    train(model2, optimizer2, scheduler2)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert scheduler.state_dict() == scheduler2.state_dict()


def test_overwrite_keeps_one_committed_copy(saved, tmp_path):
    path, model, optimizer, _ = saved
    save_sharded_state(path, {"model": model}, step=9)
    assert load_sharded_state(path, {"model": build(1)[0]}).step == 9
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging or parked copy


def test_load_refuses_missing_objects_wrong_layout_and_corruption(saved, tmp_path):
    path, model, optimizer, _ = saved
    with pytest.raises(CheckpointError, match=r"no object\(s\) \['extra'\]"):
        load_sharded_state(path, {"model": model, "extra": optimizer})
    with pytest.raises(CheckpointError, match="belong to none of the models"):
        save_sharded_state(tmp_path / "x", {"optimizer": optimizer})
    replicated = save_checkpoint(tmp_path / "replicated", {"model": model}, rng=False)
    with pytest.raises(CheckpointError, match="not a sharded one"):
        load_sharded_state(replicated, {"model": model})
    shard = path / "__0_0.distcp"
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0x01
    shard.write_bytes(bytes(raw))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CorruptCheckpointError) as info:
        load_sharded_state(path, {"model": model})
    assert Path(info.value.path) == shard
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_merge_writes_the_model_weights(saved, tmp_path):
    path, model, _, _ = saved
    written = merge_fsdp_weights(path, tmp_path / "out")
    assert written == [tmp_path / "out" / "model.safetensors"]
    weights = load_file(written[0])
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert path.is_dir()


def test_merge_options_shards_bin_and_remove(saved, tmp_path):
    path, model, _, _ = saved
    written = merge_fsdp_weights(path, tmp_path / "shards", max_shard_size=100)
    assert (tmp_path / "shards" / "model.safetensors.index.json") in written and len(written) > 2
    with pytest.raises(CheckpointError, match="inside checkpoint_dir"):
        merge_fsdp_weights(path, path / "merged", remove_checkpoint_dir=True)
    merge_fsdp_weights(path, tmp_path / "bin", safe_serialization=False,
                       remove_checkpoint_dir=True)
    state = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not path.exists()


def test_merge_of_a_bare_dcp_directory_and_of_several_models(tmp_path):
    import torch.distributed.checkpoint as dcp

    model, other = build(0)[0], build(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model.state_dict()}, checkpoint_id=tmp_path / "bare")
    merge_fsdp_weights(tmp_path / "bare", tmp_path / "out")  # Accelerate's layout: unwrapped
    weights = load_file(tmp_path / "out" / "model.safetensors")
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    two = save_sharded_state(tmp_path / "two", {"a": model, "b": other})
    with pytest.raises(CheckpointError, match="model_name="):
        merge_fsdp_weights(two, tmp_path / "o2")
    state = load_full_state_dict(two, model_name="b")
    assert all(torch.equal(state[k], v) for k, v in other.state_dict().items())


def test_merge_errors_name_the_problem(saved, tmp_path):
    path = saved[0]
    with pytest.raises(CheckpointError, match="does not exist"):
        merge_fsdp_weights(tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="not a torch.distributed.checkpoint directory"):
        merge_fsdp_weights(tmp_path / "plain", tmp_path / "out")
    victim = path / ".metadata"
    raw = bytearray(victim.read_bytes())
    raw[-20] ^= 0x01
    victim.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError) as info:
        merge_fsdp_weights(path, tmp_path / "out")
    assert Path(info.value.path) == victim
    assert not (tmp_path / "out").exists()


class _Boom:
    """Unpickling it would create a file: proves a hostile pickle never runs."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_hostile_dcp_metadata_is_never_unpickled(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    marker = tmp_path / "pwned"
    (bare / ".metadata").write_bytes(pickle.dumps(_Boom(str(marker))))
    with pytest.raises(CorruptCheckpointError, match="not allowed in DCP metadata"):
        merge_fsdp_weights(bare, tmp_path / "out")
    assert not marker.exists()


def test_hostile_non_tensor_value_is_refused(tmp_path):
    marker = tmp_path / "pwned"

    class Holder:
        def state_dict(self):
            return {"x": _Boom(str(marker))}

        def load_state_dict(self, state):
            self.state = state

    model = build()[0]
    path = save_sharded_state(tmp_path / "c", {"model": model, "holder": Holder()})
    assert not marker.exists()  # pickling at save time does not call the function
    with pytest.raises(CheckpointError, match="rank 0: UnpicklingError: Weights only load"):
        load_sharded_state(path, {"model": model, "holder": Holder()})
    assert not marker.exists()


def test_cli_merge_weights(saved, tmp_path, capsys):
    path = saved[0]
    parser = argparse.ArgumentParser(prog="accel")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["merge-weights", str(path), str(tmp_path / "cli"),
                              "--unsafe_serialization", "--remove_checkpoint_dir"])
    assert args.func(args) == 0
    assert "pytorch_model.bin" in capsys.readouterr().out
    assert (tmp_path / "cli" / "pytorch_model.bin").is_file() and not path.exists()

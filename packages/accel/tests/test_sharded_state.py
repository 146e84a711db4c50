"""The layout checks of Accelerator.load_state for sharded (FSDP2) models, in one process.

Saving and loading sharded models runs in 2 processes in
tests/integration/test_checkpoint_sharded_facade.py.
"""

from __future__ import annotations

import pytest
from accel_checkpoint.errors import CheckpointError
from torch import nn

from accel._sharded_state import check_layout, is_sharded_model


def test_matching_layouts_pass():
    check_layout("sharded", 2, True, "ckpt")
    check_layout("replicated", 1, False, "ckpt")


def test_sharded_checkpoint_into_unsharded_models_says_how_to_fix():
    with pytest.raises(CheckpointError) as info:
        check_layout("sharded", 4, False, "/runs/ckpt")
    text = str(info.value)
    assert "/runs/ckpt is a sharded checkpoint (saved by 4 process(es)" in text
    assert "fully_shard" in text
    assert "accel merge-weights /runs/ckpt OUT" in text and "load_checkpoint_in_model" in text


def test_replicated_checkpoint_into_sharded_models_says_how_to_fix():
    with pytest.raises(CheckpointError) as info:
        check_layout("replicated", 2, True, "/runs/ckpt")
    text = str(info.value)
    assert "/runs/ckpt is a replicated checkpoint" in text and "saved by 2 process(es)" in text
    assert "prepared without fully_shard" in text
    assert "load_checkpoint_in_model(model, '/runs/ckpt'), then fully_shard(model)" in text


def test_unknown_layout_is_named():
    with pytest.raises(CheckpointError, match="layout 'pipeline'.*upgrade accel"):
        check_layout("pipeline", 1, False, "ckpt")


def test_plain_models_are_not_sharded():
    assert not is_sharded_model(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))


def test_save_on_each_node_is_refused_for_sharded_models(tmp_path, monkeypatch):
    """Each rank writes only its own shards: a per-machine copy cannot be complete."""
    from accel_state.errors import ConfigurationError
    from torch import nn

    from accel import Accelerator, checkpointing
    from accel.utils import ProjectConfiguration

    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        str(tmp_path), save_on_each_node=True))
    accelerator.prepare(nn.Linear(2, 2))
    monkeypatch.setattr(checkpointing, "_any_sharded", lambda accelerator: True)
    with pytest.raises(ConfigurationError, match="save_on_each_node=True cannot be used"):
        accelerator.save_state(tmp_path / "ckpt")
    assert not any(tmp_path.iterdir())

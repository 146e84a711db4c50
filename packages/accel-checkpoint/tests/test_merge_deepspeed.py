"""merge_deepspeed_weights / `accel merge-weights` on DeepSpeed checkpoints: recognising
them, the pickle opt-in, picking the model and the errors, all before DeepSpeed is needed.
The merge itself runs in tests/integration/deepspeed (a real ZeRO-2 checkpoint)."""

from __future__ import annotations

import pytest
from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.merge_deepspeed import (
    _locate,
    is_deepspeed_checkpoint,
    merge_deepspeed_weights,
)


def _bare(root, *tags):
    for tag in tags:
        (root / tag).mkdir(parents=True)
        (root / tag / "mp_rank_00_model_states.pt").write_bytes(b"x")
    return root


def test_recognises_bare_deepspeed_save_dirs(tmp_path):
    assert not is_deepspeed_checkpoint(tmp_path)
    _bare(tmp_path / "ds", "global_step3")
    assert is_deepspeed_checkpoint(tmp_path / "ds")
    assert is_deepspeed_checkpoint(tmp_path / "ds" / "global_step3")
    assert _locate(tmp_path / "ds", None) == (tmp_path / "ds", "global_step3")
    assert _locate(tmp_path / "ds" / "global_step3", None) == (tmp_path / "ds", "global_step3")


def test_picks_the_model_among_several(tmp_path):
    root = _bare(tmp_path, "model", "model_1")
    with pytest.raises(CheckpointError, match=r"several DeepSpeed checkpoints \(model, model_1\)"):
        _locate(root, None)
    assert _locate(root, "model_1") == (root, "model_1")
    with pytest.raises(CheckpointError, match=r"no DeepSpeed checkpoint 'model_2'"):
        _locate(root, "model_2")
    (root / "latest").write_text("model_1")
    assert _locate(root, None) == (root, "model_1")


def test_refuses_without_trust_and_bad_paths(tmp_path, monkeypatch):
    root = _bare(tmp_path / "ds", "model")
    with pytest.raises(CheckpointError, match="--trust_pickles"):
        merge_deepspeed_weights(root, tmp_path / "out")
    monkeypatch.setenv("ACCEL_CHECKPOINT_TRUST_PICKLES", "1")
    with pytest.raises(CheckpointError, match="inside checkpoint_dir"):
        merge_deepspeed_weights(root, root / "out", remove_checkpoint_dir=True)
    with pytest.raises(CheckpointError, match="does not exist"):
        merge_deepspeed_weights(tmp_path / "missing", tmp_path / "out")


def test_an_accel_checkpoint_of_another_layout_is_not_deepspeed(tmp_path):
    import torch
    from accel_checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "ckpt", {"model": torch.nn.Linear(2, 2)}, rng=False)
    assert not is_deepspeed_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="'replicated' checkpoint, not a DeepSpeed one"):
        _locate(tmp_path / "ckpt", None)

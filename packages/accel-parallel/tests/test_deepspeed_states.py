"""read_zero_full_states refuses what it cannot rebuild, naming the way out (the real ZeRO-2
checkpoint, saved by 2 DeepSpeed processes:
tests/integration/deepspeed/test_deepspeed_across.py)."""

from __future__ import annotations

import pytest
import torch
from accel_state import ConfigurationError


def _model_states(folder, **extra) -> None:
    torch.save({"module": {"weight": torch.ones(2)}, "param_shapes": [{"weight": (2,)}],
                **extra}, folder / "mp_rank_00_model_states.pt")


def test_layouts_it_cannot_rebuild_are_refused(tmp_path):
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed_states import read_zero_full_states

    folder = tmp_path / "ckpt" / "deepspeed" / "model"
    folder.mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="no mp_rank_00_model_states.pt .*ZeRO-3.*"
                                                 "accel merge-weights .*ckpt OUT"):
        read_zero_full_states(folder)
    _model_states(folder)
    (folder / "mp_rank_01_model_states.pt").write_bytes(b"")
    with pytest.raises(ConfigurationError, match="model-parallel"):
        read_zero_full_states(folder)
    (folder / "mp_rank_01_model_states.pt").unlink()
    for rank in (0, 2):
        (folder / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    with pytest.raises(ConfigurationError, match=r"ranks \[0, 2\]"):
        read_zero_full_states(folder)
    (folder / "zero_pp_rank_2_mp_rank_00_optim_states.pt").unlink()
    torch.save({"optimizer_state_dict": {"zero_stage": 3}},
               folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(ConfigurationError, match="ZeRO-3 partitions in a layout other than"):
        read_zero_full_states(folder)


def test_without_partitions_the_torch_optimizer_state_is_returned(tmp_path):
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed_states import read_zero_full_states

    state = {"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"params": [0]}]}
    _model_states(tmp_path, optimizer=state)
    weights, optimizer = read_zero_full_states(tmp_path)
    assert torch.equal(weights["weight"], torch.ones(2)) and optimizer["param_groups"] == [
        {"params": [0]}]

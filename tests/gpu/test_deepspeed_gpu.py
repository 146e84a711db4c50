"""DeepSpeed ZeRO-2 and ZeRO-3 in bf16 on one CUDA device (NCCL, a one-process group made by
the strategy): a few training steps, the gathered weights, a checkpoint round trip.
Needs CUDA and DeepSpeed."""

from __future__ import annotations

import pytest
import torch
from accel_state import DistributedType
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_bf16_trains_and_checkpoints_on_one_gpu(stage, tmp_path, monkeypatch):
    pytest.importorskip("deepspeed")
    monkeypatch.setenv("LOCAL_RANK", "0")
    from accel import Accelerator
    from accel.utils import DeepSpeedPlugin
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=DeepSpeedPlugin(
        zero_stage=stage, gradient_clipping=1.0))
    assert accelerator.distributed_type == DistributedType.DEEPSPEED
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 16)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert accelerator.strategy.configs["default"]["bf16"]["enabled"] is True
    assert next(model.parameters()).device.type == "cuda"
    losses = []
    for xb, yb in loader:
        loss = nn.functional.mse_loss(model(xb.to(torch.bfloat16)).float(), yb)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert model.global_steps == len(loader)
    assert losses[-1] < losses[0], losses
    state = accelerator.get_state_dict(model)
    assert state["0.weight"].shape == (32, 16) and state["0.weight"].dtype == torch.bfloat16
    path = accelerator.save_state(str(tmp_path / "ckpt"))
    accelerator.load_state(path)  # DeepSpeed's pickles: read with an allow-list

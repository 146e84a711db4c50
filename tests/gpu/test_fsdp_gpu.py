"""FSDP2 on one CUDA device (NCCL, a one-process group of the strategy's own): bf16 policy,
a training step, a sharded checkpoint round trip. Needs CUDA."""

from __future__ import annotations

import pytest
import torch
from accel_state import DistributedType
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_fsdp2_trains_and_checkpoints_on_one_gpu(tmp_path):
    import torch.distributed as dist

    from accel import Accelerator, FullyShardedDataParallelPlugin

    try:
        accelerator = Accelerator(mixed_precision="bf16",
                                  fsdp_plugin=FullyShardedDataParallelPlugin())
        assert accelerator.distributed_type == DistributedType.FSDP
        assert dist.get_backend() == "nccl"
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
        x = torch.randn(8, 16, device="cuda")
        before = model(x).detach().clone()
        assert before.dtype == torch.float32  # bf16 compute, fp32 output
        accelerator.backward(model(x).pow(2).mean())
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        after = model(x).detach().clone()
        assert not torch.equal(before, after)
        path = accelerator.save_state(tmp_path / "ckpt")
        optimizer.step()
        accelerator.load_state(path)
        torch.testing.assert_close(model(x).detach(), after)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_fsdp2_fp16_scales_the_loss_with_the_sharded_scaler():
    import torch.distributed as dist
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    from accel import Accelerator, FullyShardedDataParallelPlugin

    try:
        accelerator = Accelerator(mixed_precision="fp16",
                                  fsdp_plugin=FullyShardedDataParallelPlugin())
        assert isinstance(accelerator.scaler, ShardedGradScaler)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
        x = torch.randn(8, 16, device="cuda")
        scale = accelerator.scaler.get_scale()
        accelerator.backward(model(x).pow(2).mean() * float("inf"))
        optimizer.step()
        assert optimizer.step_was_skipped and accelerator.scaler.get_scale() == scale / 2
        losses = []
        for _ in range(5):
            loss = model(x).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

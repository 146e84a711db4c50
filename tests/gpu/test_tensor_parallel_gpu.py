"""Tensor and context parallelism on CUDA (NCCL). One GPU: TP on a one-rank tp mesh and a
context-parallel block on a one-rank cp mesh (both equal the plain model). Two or more GPUs
(skipped otherwise): TP over 2 processes, TP × FSDP2 over 4, and CP forward over 2, each
equal to the plain model, through `accel launch` (tests/gpu/nd_gpu_script.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SCRIPT = Path(__file__).with_name("nd_gpu_script.py")


@pytest.fixture
def nccl_group():
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    try:
        yield
    finally:
        dist.destroy_process_group()


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_tensor_parallel_plan_on_one_gpu(nccl_group):
    from accel_parallel.mesh.tensor_parallel import apply_tensor_parallel, clip_grad_norm_
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    plain = MLP().cuda()
    torch.manual_seed(0)
    model = MLP().cuda()
    mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))
    apply_tensor_parallel(model, mesh, {"up": "colwise", "down": "rowwise"})
    x = torch.randn(8, 32, device="cuda")
    torch.testing.assert_close(model(x), plain(x))
    model(x).pow(2).mean().backward()
    plain(x).pow(2).mean().backward()
    torch.testing.assert_close(clip_grad_norm_(model.parameters(), 0.5),
                               torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, seq, 64)
        q, k, v = (t.view(*x.shape[:2], 4, 16).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(*x.shape[:2], 64)


def test_context_parallel_block_on_one_gpu(nccl_group):
    from accel_parallel.mesh.context_parallel import context_parallel_block
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    model = Attention().cuda().to(torch.bfloat16)
    x = torch.randn(2, 64, 64, device="cuda", dtype=torch.bfloat16)
    expected = model(x)
    mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("cp",))
    buffer = x.clone()
    with context_parallel_block(mesh, [buffer], [1]):
        got = model(buffer)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tp_tp_fsdp_and_cp_across_gpus():
    count = torch.cuda.device_count()
    world = 4 if count >= 4 else 2
    proc = subprocess.run([sys.executable, "-m", "accel_launch", "launch", "--multi_gpu",
                           "--num_processes", str(world), str(SCRIPT)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "ND-GPU-OK" in proc.stdout, proc.stdout

"""Run by tests/gpu/test_tensor_parallel_gpu.py on 2 or 4 GPUs (NCCL) through accel launch:
TP over every GPU, TP × FSDP2 (4 GPUs), and a context-parallel attention forward over 2,
each equal to the plain model on the same data."""

from __future__ import annotations

import torch
import torch.distributed as dist
from accel import Accelerator, ParallelismConfig
from torch import nn


class Net(nn.Module):
    _tp_plan = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict({"up": nn.Linear(64, 128),
                                                   "down": nn.Linear(128, 64)})
                                    for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block["down"](torch.relu(block["up"](x)))
        return x


def tp_step(config: ParallelismConfig) -> None:
    accelerator = Accelerator(parallelism_config=config)
    torch.manual_seed(0)
    plain = Net().cuda()
    torch.manual_seed(0)
    model = accelerator.prepare(Net())
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1)).cuda()  # one batch
    torch.testing.assert_close(model(x), plain(x), rtol=1e-4, atol=1e-4)
    accelerator.backward(model(x).pow(2).mean())
    plain(x).pow(2).mean().backward()
    expected = torch.nn.utils.clip_grad_norm_(plain.parameters(), 1e3)
    torch.testing.assert_close(accelerator.clip_grad_norm_(model.parameters(), 1e3).cuda(),
                               expected, rtol=1e-4, atol=1e-4)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(*x.shape[:2], 4, 16).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(*x.shape[:2], 64)


def cp_forward(world: int) -> None:
    from torch.distributed.tensor.experimental._attention import _cp_options

    _cp_options.enable_load_balance = False  # shard i is the i-th sequence chunk
    accelerator = Accelerator(parallelism_config=ParallelismConfig(
        cp_size=2, dp_shard_size=world // 2))
    torch.manual_seed(0)
    plain = Attention().cuda().to(torch.bfloat16)
    x = torch.randn(2, 64, 64, generator=torch.Generator().manual_seed(2)).cuda().bfloat16()
    expected = plain(x)
    torch.manual_seed(0)
    model = accelerator.prepare(Attention().to(torch.bfloat16))
    buffer = x.clone()
    with accelerator.maybe_context_parallel(buffers=[buffer], buffer_seq_dims=[1]):
        got = model(buffer)
    rank = accelerator.context_parallel_rank
    torch.testing.assert_close(got, expected.chunk(2, dim=1)[rank], rtol=2e-2, atol=2e-2)


def main() -> None:
    world = Accelerator().num_processes
    tp_step(ParallelismConfig(tp_size=2, dp_replicate_size=world // 2))
    if world >= 4:
        tp_step(ParallelismConfig(tp_size=2, dp_shard_size=world // 2))
    cp_forward(world)
    print(f"ND-GPU-OK rank={dist.get_rank()}", flush=True)


if __name__ == "__main__":
    main()

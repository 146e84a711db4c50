"""fp16 and fp8 with FSDP2 through the unchanged Accelerator, in 2 processes.
argv[1]: a scratch directory.

Each rank holds only its shards of the gradients, so an inf in one rank's shard is seen by
that rank alone: the loss scaler must agree before a step is skipped. Checked here: the
scaler is shard-aware; an inf put into rank 0's local shard only makes *both* ranks skip
the step and halve the scale; the forward computes in fp16 over fp32 shards; training then
lowers the loss with the same result on both ranks; save_state / load_state restores the
scale. Then fp8 (torchao, when installed): the converted layers' weights are sharded as
torchao's fp8-all-gather tensors, and training lowers the loss identically on both ranks.
"""

from __future__ import annotations

import importlib.util
import sys

import torch
import torch.distributed as dist
from accel import Accelerator, FullyShardedDataParallelPlugin
from torch import nn
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor


def local_copies(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().to_local().clone() for p in model.parameters()]


def train_together(accelerator: Accelerator, model: nn.Module,
                   optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
                   ) -> list[float]:
    """30 steps, none skipped: the loss at least halves and is the same on both ranks (one
    sharded model computes one loss)."""
    losses = []
    for _ in range(30):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        assert not optimizer.step_was_skipped
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5, losses
    gathered = [None, None]
    dist.all_gather_object(gathered, losses)
    assert gathered[0] == gathered[1], gathered
    return losses


def fp8_run() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp8",
                              fsdp_plugin=FullyShardedDataParallelPlugin())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    kinds = [type(module).__name__ for module in model]
    assert kinds.count("Float8Linear") == 2, kinds  # first and last Linear stay high precision
    local = model[2].weight.to_local()
    assert type(local).__name__ == "WeightWithDynamicFloat8CastTensor", type(local)
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 16, generator=generator), torch.randn(64, 8, generator=generator)
    losses = train_together(accelerator, model, optimizer, x, y)
    print(f"FSDP-FP8-OK rank={accelerator.process_index} loss={losses[-1]:.4f}", flush=True)


def main() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp16",
                              fsdp_plugin=FullyShardedDataParallelPlugin())
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert isinstance(accelerator.scaler, ShardedGradScaler), type(accelerator.scaler)
    weight = next(model.parameters())
    assert isinstance(weight, DTensor) and weight.dtype == torch.float32, weight.dtype
    seen = []
    model[0].register_forward_hook(lambda module, args, out: seen.append(out.dtype))

    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True) / 4
    scale = accelerator.scaler.get_scale()
    before = local_copies(model)
    accelerator.backward(nn.functional.mse_loss(model(x), y))
    assert seen == [torch.float16], f"forward computed in {seen}, not fp16"
    if rank == 0:  # an inf in this rank's own shard only
        weight.grad.to_local().view(-1)[0] = float("inf")
    optimizer.step()
    optimizer.zero_grad()
    assert optimizer.step_was_skipped, f"rank {rank} stepped over an inf in rank 0's shard"
    assert all(torch.equal(a, b) for a, b in zip(before, local_copies(model), strict=True))
    assert accelerator.scaler.get_scale() == scale / 2, accelerator.scaler.get_scale()

    losses = train_together(accelerator, model, optimizer, x, y)

    accelerator.save_state(sys.argv[1])
    saved_scale = accelerator.scaler.get_scale()
    accelerator.backward(nn.functional.mse_loss(model(x), y) * float("inf"))
    optimizer.step()
    optimizer.zero_grad()
    assert accelerator.scaler.get_scale() == saved_scale / 2
    accelerator.load_state(sys.argv[1])
    assert accelerator.scaler.get_scale() == saved_scale, accelerator.scaler.get_scale()
    print(f"FSDP-FP16-OK rank={rank} scale={saved_scale} loss={losses[-1]:.4f}", flush=True)
    if importlib.util.find_spec("torchao") is not None:
        fp8_run()


if __name__ == "__main__":
    main()

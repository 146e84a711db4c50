"""Tensor parallelism through the unchanged Accelerator, 2 processes (tp_size=2).
argv[1]: a scratch directory.

- The model's own plan (``_tp_plan``): the mesh is ("tp",), the blocks' weights are sharded
  DTensors, the forward equals the single-process model, and after steps with gradient
  accumulation and clipping the weights and norms equal the single-process run on the same
  batches; both ranks (one TP group) read the same batches.
- ``get_state_dict`` gathers the full weights; a save_state / load_state round trip is exact
  and uses the sharded layout.
- A user plan with sequence parallelism (norms on sequence shards) equals the plain model.
- An all-ones ParallelismConfig is DDP over both processes, equal to one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accel import Accelerator, ParallelismConfig
from accel.utils import TorchTensorParallelConfig
from accel_checkpoint.manifest import read_manifest
from nd_common import Net, compare, global_batches, reference, train
from torch import nn
from torch.distributed.tensor import DTensor, Shard


def check_plan_from_model(scratch: Path) -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2,
                              parallelism_config=ParallelismConfig(tp_size=2))
    rank = accelerator.process_index
    mesh = accelerator.torch_device_mesh
    assert mesh.mesh_dim_names == ("tp",), mesh
    assert accelerator.tensor_parallel_rank == rank and accelerator.data_parallel_rank == 0
    assert accelerator.strategy.dp_size == 1 and accelerator.parallelism_config.tp_size == 2
    torch.manual_seed(0)
    model = Net()
    probe = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    expected_out = model(probe).detach()
    torch.manual_seed(rank)  # each process initialises differently: rank 0's weights win
    first = accelerator.prepare_model(Net())  # forward before any step: the plain model's
    with torch.no_grad():
        torch.testing.assert_close(first(probe), expected_out, rtol=1e-5, atol=1e-6)
    got = train(accelerator, model)
    prepared = got["model"]
    up = prepared.blocks[0].up.weight
    assert isinstance(up, DTensor) and up.placements == (Shard(0),), up.placements
    assert up.to_local().shape == (16, 16), up.to_local().shape  # half of 32 rows
    assert not isinstance(prepared.inp.weight, DTensor)  # not in the plan: stays whole
    steps = global_batches(accelerator, got["batches"])
    assert all(len(micro) == 2 for micro in steps)  # two accumulated micro-batches per step
    ref = reference(steps)
    compare("TP", accelerator, got, ref)
    with torch.no_grad():  # forward after training equals the reference's
        torch.testing.assert_close(prepared(probe), ref["model"](probe), rtol=1e-4, atol=1e-5)

    rows = [accelerator.gather_for_metrics(yb) for _, yb in got["loader"]]  # over dp only
    assert sum(len(r) for r in rows) == 32, [len(r) for r in rows]  # not once per TP rank

    path = accelerator.save_state(scratch / "tp")
    assert read_manifest(path).layout == "sharded"
    saved = {k: (v.full_tensor() if isinstance(v, DTensor) else v).clone()
             for k, v in prepared.state_dict().items()}
    with torch.no_grad():
        for parameter in prepared.parameters():
            parameter.add_(1.0)
    accelerator.load_state(path)
    for key, value in prepared.state_dict().items():
        full = value.full_tensor() if isinstance(value, DTensor) else value
        assert torch.equal(full, saved[key]), key
    full = accelerator.get_state_dict(prepared)
    if accelerator.is_main_process:
        assert full["blocks.0.up.weight"].shape == (32, 16)
        assert torch.equal(full["blocks.0.up.weight"], saved["blocks.0.up.weight"])
    else:
        assert full == {}


class SPNet(nn.Module):
    """(batch, seq, 16) -> norm -> MLP -> norm -> out, with Megatron-style sequence
    parallelism: norms run on sequence shards between the TP layers."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)
        self.norm2 = nn.LayerNorm(16)
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.inp(x))
        return self.out(self.norm2(self.down(torch.relu(self.up(h)))))


def check_sequence_parallel() -> None:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {  # strings where they say it all, torch styles for the sequence-shard boundaries
        "inp": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": "sequence_parallel",
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)),
        "norm2": "sequence_parallel",
        "out": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    config = ParallelismConfig(tp_size=2, tp_handler=TorchTensorParallelConfig(tp_plan=plan))
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    torch.manual_seed(0)
    plain = SPNet()
    torch.manual_seed(0)
    model = accelerator.prepare(SPNet())
    assert isinstance(model.norm.weight, DTensor)  # replicated on the tp mesh
    x = torch.randn(3, 8, 6, generator=torch.Generator().manual_seed(4))
    out = model(x)
    torch.testing.assert_close(out, plain(x), rtol=1e-4, atol=1e-5)
    out.pow(2).mean().backward()
    plain(x).pow(2).mean().backward()
    grad = model.norm.weight.grad
    torch.testing.assert_close(grad.full_tensor(), plain.norm.weight.grad, rtol=1e-4, atol=1e-5)


def check_ddp_from_sizes() -> None:
    """An all-ones configuration on 2 processes is DDP over ``dp_replicate`` (Accelerate)."""
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig())
    assert accelerator.parallelism_config.dp_replicate_size == 2
    assert accelerator.torch_device_mesh.mesh_dim_names == ("dp_replicate",)
    assert accelerator.data_parallel_rank == accelerator.process_index
    torch.manual_seed(0)
    got = train(accelerator, Net())
    assert isinstance(got["model"], nn.parallel.DistributedDataParallel)
    compare("DDP", accelerator, got, reference(global_batches(accelerator, got["batches"])))


def main(scratch: Path) -> None:
    check_plan_from_model(scratch)
    check_sequence_parallel()
    check_ddp_from_sizes()
    import torch.distributed as dist

    print(f"TP-OK rank={dist.get_rank()}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""N-D parallelism through the unchanged Accelerator, 4 processes. Each run trains the same
seeded model and is compared with the single-process model trained on the same global
batches (what DDP computes); ranks of one TP group read the same batches.

- TP × FSDP2 (dp_shard 2 × tp 2, FSDP plugin auto-wrapping the blocks, with activation
  checkpointing: TP, then checkpointing, then FSDP2): 2-D DTensors.
- HSDP (dp_replicate 2 × dp_shard 2, HYBRID_SHARD plugin).
- TP × data-parallel replicas (dp_replicate 2 × tp 2, no sharding).
- DDP on the mesh (dp_replicate 4): ``join_uneven_inputs`` joins ranks with uneven batches.

argv[1]: a scratch directory (a sharded save_state / load_state round trip of TP × FSDP2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accel import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig
from accel_state import DistributedType
from nd_common import Net, compare, global_batches, reference, train
from torch.distributed.tensor import DTensor


def run(name: str, config: ParallelismConfig, plugin=None, mesh=(), fsdp=True) -> None:
    accelerator = Accelerator(cpu=True, parallelism_config=config, fsdp_plugin=plugin)
    assert accelerator.torch_device_mesh.mesh_dim_names == mesh, (
        name, accelerator.torch_device_mesh)
    expected_type = DistributedType.FSDP if fsdp else DistributedType.MULTI_CPU
    assert accelerator.distributed_type == expected_type, (name, accelerator.distributed_type)
    state = accelerator.state  # what runs, as Accelerate's libraries read it
    assert state.is_fsdp2 == fsdp == (state.fsdp_plugin is not None), (name, state.fsdp_plugin)
    assert plugin is None or state.fsdp_plugin is plugin, name
    assert state.parallelism_config is accelerator.parallelism_config, name
    torch.manual_seed(0)
    got = train(accelerator, Net())
    model = got["model"]
    assert all(isinstance(p, DTensor) for p in model.parameters()), name
    steps = global_batches(accelerator, got["batches"])
    assert all(len(micro) == config.data_parallel_size for micro in steps), name
    compare(name, accelerator, got, reference(steps))
    return accelerator


def round_trip(accelerator, scratch: Path) -> None:
    """save_state / load_state of 2-D (dp_shard × tp) DTensors: sharded, exact."""
    model = accelerator._models[0]
    saved = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    path = accelerator.save_state(scratch / "tp_fsdp")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(path)
    for key, value in model.state_dict().items():
        assert torch.equal(value.full_tensor(), saved[key]), key


def ddp_on_mesh_joins(rank: int) -> None:
    """Pure data parallelism on the mesh runs DDP, and join_uneven_inputs joins it: rank r
    trains r + 1 batches without hanging the others (and without warning that it needs DDP)."""
    import warnings

    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(
        dp_replicate_size=4))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    assert accelerator.state.fsdp_plugin is None and not accelerator.state.is_fsdp2
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            for _ in range(rank + 1):
                accelerator.backward(model(torch.ones(2, 4)).sum())
                optimizer.step()
                optimizer.zero_grad()
    assert not [w for w in seen if "join_uneven_inputs" in str(w.message)], seen
    print(f"ND-JOIN-OK rank={rank}", flush=True)


def main(scratch: Path) -> None:
    tp_fsdp = run("TP x FSDP2", ParallelismConfig(dp_shard_size=2, tp_size=2),
                  FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                                                 activation_checkpointing=True),
                  mesh=("dp_shard", "tp"))
    rank = dist.get_rank()
    block = tp_fsdp.unwrap_model(tp_fsdp._models[0]).blocks[0]
    assert type(block.forward).__name__ == "CheckpointedForward" and hasattr(block, "unshard")
    assert block.up.weight.device_mesh.mesh_dim_names == ("dp_shard", "tp")  # 2-D
    assert (tp_fsdp.data_parallel_shard_rank, tp_fsdp.tensor_parallel_rank) == divmod(rank, 2)
    assert tp_fsdp.strategy.dp_size == 2 and tp_fsdp.strategy.dp_rank == rank // 2
    round_trip(tp_fsdp, scratch)
    hsdp = run("HSDP", ParallelismConfig(dp_replicate_size=2, dp_shard_size=2),
               FullyShardedDataParallelPlugin(sharding_strategy="HYBRID_SHARD"),
               mesh=("dp_replicate", "dp_shard"))
    assert (hsdp.data_parallel_rank, hsdp.data_parallel_shard_rank) == divmod(rank, 2)
    assert hsdp.strategy.dp_size == 4
    run("TP x replicas", ParallelismConfig(dp_replicate_size=2, tp_size=2),
        mesh=("dp_replicate", "dp_shard", "tp"), fsdp=False)
    # sharding asked for by the sizes alone: an FSDP run, with the FSDP2 plugin it built
    sharded = Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_shard_size=4))
    assert sharded.state.is_fsdp2 and sharded.state.fsdp_plugin is not None
    ddp_on_mesh_joins(rank)
    print(f"ND-OK rank={rank}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

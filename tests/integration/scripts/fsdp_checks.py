"""FSDP2 through the unchanged Accelerator, in 2 processes. argv[1]: a scratch directory.

The same seeded model and data, with the optimizer built before ``prepare`` (re-bound to
the sharded parameters) and 2 accumulated batches per step, trained by DDP and by FSDP2
with FULL_SHARD (auto-wrapped by the model's ``_no_split_modules``), SHARD_GRAD_OP and
NO_SHARD, with the optimizer built after ``prepare`` and with activation checkpointing:
the gradient norms and the final weights agree. Then a sharded save_state /
load_state round trip; Accelerate's save/load_fsdp_model/optimizer helpers (full and
sharded); weights broadcast from the main process into the shards
(``cpu_ram_efficient_loading``: the other rank builds its model on the meta device); and a
bf16 run whose parameters are sharded in fp32 and computed in bf16 through FSDP2's policy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel_checkpoint.manifest import read_manifest
from accel_state import DistributedType
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Net(nn.Module):
    _no_split_modules = ["Block"]  # the transformers convention FSDP's auto-wrap reads

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.inp(x)))


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 6, generator=generator)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


def fixed_output(model: nn.Module) -> torch.Tensor:
    """The model's output on a fixed input (a collective under FSDP2: call on every rank)."""
    with torch.no_grad():
        return model(torch.randn(5, 6, generator=torch.Generator().manual_seed(3))).detach()


def run(plugin: FullyShardedDataParallelPlugin | None, mixed_precision: str = "no",
        optimizer_after_prepare: bool = False) -> dict:
    torch.manual_seed(0)
    model = Net()
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin, gradient_accumulation_steps=2,
                              mixed_precision=mixed_precision)
    state = accelerator.state  # what runs, as Accelerate's libraries read it
    assert accelerator.mixed_precision == state.mixed_precision == mixed_precision
    assert accelerator.native_amp == (mixed_precision != "no")
    assert state.is_fsdp2 == (plugin is not None) and state.fsdp_plugin is plugin  # None: DDP
    if optimizer_after_prepare:  # built on the sharded parameters
        model = accelerator.prepare(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        optimizer, loader = accelerator.prepare(optimizer, DataLoader(_data(), batch_size=4))
    else:  # built before prepare: re-bound to the sharded parameters
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                       DataLoader(_data(), batch_size=4))
    norms = []
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
            assert loss.dtype == torch.float32, loss.dtype
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 1e3)))
            optimizer.step()
            optimizer.zero_grad()
    full = accelerator.get_state_dict(model)
    return {"accelerator": accelerator, "model": model, "norms": norms, "full": full,
            "optimizer": optimizer}


def compare(name: str, got: dict, expected: dict) -> None:
    torch.testing.assert_close(torch.tensor(got["norms"]), torch.tensor(expected["norms"]),
                               rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} norms: {m}")
    if got["accelerator"].is_main_process:
        for key, value in expected["full"].items():
            torch.testing.assert_close(got["full"][key], value, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, k=key: f"{name} {k}: {m}")


def check_fsdp_io(result: dict, scratch: Path) -> None:
    """Accelerate's save/load_fsdp_model and save/load_fsdp_optimizer (``accel.utils``):
    FULL (rank 0 writes one file, loading broadcasts it) and SHARDED (every rank its DCP
    shards) both restore the exact weights and momentum buffers."""
    from accel.utils import (
        load_fsdp_model,
        load_fsdp_optimizer,
        save_fsdp_model,
        save_fsdp_optimizer,
    )

    accelerator, model, optimizer = result["accelerator"], result["model"], result["optimizer"]
    state = optimizer.optimizer.state

    def snapshot() -> list[torch.Tensor]:
        return ([v.full_tensor().clone() for v in model.state_dict().values()]
                + [state[p]["momentum_buffer"].full_tensor().clone() for p in model.parameters()])

    expected = snapshot()
    for kind, files in (("FULL_STATE_DICT", ["pytorch_model_fsdp.bin", "optimizer.bin"]),
                        ("SHARDED_STATE_DICT", ["pytorch_model_fsdp_0/.metadata",
                                                "optimizer_0/.metadata"])):
        plugin = FullyShardedDataParallelPlugin(state_dict_type=kind)
        save_fsdp_model(plugin, accelerator, model, scratch / kind)
        save_fsdp_optimizer(plugin, accelerator, optimizer, model, scratch / kind)
        accelerator.wait_for_everyone()
        assert all((scratch / kind / f).is_file() for f in files), (kind, files)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1.0)
                state[parameter]["momentum_buffer"].zero_()
        load_fsdp_model(plugin, accelerator, model, scratch / kind)
        load_fsdp_optimizer(plugin, accelerator, optimizer, model, scratch / kind)
        for got, want in zip(snapshot(), expected, strict=True):
            assert torch.equal(got, want), kind
    shards = list((scratch / "SHARDED_STATE_DICT" / "pytorch_model_fsdp_0").glob("*.distcp"))
    assert len(shards) == accelerator.num_processes, shards  # each rank wrote its own shards


def main(scratch: Path) -> None:
    ddp = run(None)
    assert ddp["accelerator"].distributed_type == DistributedType.MULTI_CPU
    full = run(FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD",
                                              auto_wrap_policy="TRANSFORMER_BASED_WRAP"))
    accelerator, model = full["accelerator"], full["model"]
    assert accelerator.distributed_type == DistributedType.FSDP and accelerator.is_fsdp2
    assert all(isinstance(p, DTensor) for p in model.parameters())
    wrapped = [type(m).__name__ for m in model.modules() if hasattr(m, "unshard")]
    assert wrapped.count("FSDPBlock") == 2 and "FSDPNet" in wrapped, wrapped
    params = {id(p) for p in model.parameters()}
    assert all(id(p) in params for g in full["optimizer"].param_groups for p in g["params"])
    compare("FULL_SHARD", full, ddp)
    compare("SHARD_GRAD_OP", run(FullyShardedDataParallelPlugin(
        sharding_strategy="SHARD_GRAD_OP")), ddp)
    compare("NO_SHARD", run(FullyShardedDataParallelPlugin(sharding_strategy="NO_SHARD")), ddp)
    compare("optimizer after prepare", run(FullyShardedDataParallelPlugin(),
                                           optimizer_after_prepare=True), ddp)
    compare("activation checkpointing", run(FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP", activation_checkpointing=True)), ddp)

    # sharded checkpoint of the FULL_SHARD run: every rank its shards, exact round trip
    saved = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    path = accelerator.save_state(scratch / "fsdp")
    assert read_manifest(path).layout == "sharded"
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(path)
    for key, value in model.state_dict().items():
        assert torch.equal(value.full_tensor(), saved[key]), key
    check_fsdp_io(full, scratch / "fsdp_io")
    output = fixed_output(model)  # recorded for the resharding runs (fsdp_reshard.py)
    if accelerator.is_main_process:
        torch.save(output, scratch / "fsdp_output.pt")

    # weights from the main process only: the other rank builds its model on the meta device
    torch.manual_seed(5)
    if accelerator.is_main_process:
        source = Net()
    else:
        with torch.device("meta"):
            source = Net()
    torch.manual_seed(5)
    expected = {k: v.clone() for k, v in Net().state_dict().items()}  # rank 0's weights
    synced = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
        cpu_ram_efficient_loading=True, auto_wrap_policy="TRANSFORMER_BASED_WRAP"))
    source = synced.prepare(source)
    for key, value in source.state_dict().items():
        assert torch.equal(value.full_tensor(), expected[key]), key

    bf16 = run(FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP"),
               mixed_precision="bf16")  # nested units: inner outputs stay bf16
    policy_dtypes = {p.dtype for p in bf16["model"].parameters()}
    assert policy_dtypes == {torch.float32}, policy_dtypes  # sharded master weights stay fp32
    assert all(n == n for n in bf16["norms"]), bf16["norms"]  # finite
    print(f"FSDP-OK rank={accelerator.process_index}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

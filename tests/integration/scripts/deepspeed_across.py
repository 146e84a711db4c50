"""A DeepSpeed ZeRO-2 checkpoint loaded into models that are not DeepSpeed engines.

The 2-process phases run inside deepspeed_checks.py's launches (``train`` calls
``save_phase``, ``resume`` calls ``load_phase``: no launch of their own); the argv form
stays for running one phase by hand.
``save ROOT`` (2 processes): ZeRO-2 with a torch Adam trains 2 steps, saves (``ROOT/ds``),
records the weights, takes a third step and records the weights again (rank 0 writes both).
``load ROOT`` (2 processes, DDP): fresh models load ``ROOT/ds`` (ZeRO's partitions joined
into full weights and Adam state): the weights equal the saved ones; the same third step
then equals the DeepSpeed run's (Adam's moments and step came back). Then a DeepSpeed run
on one process refuses the 2-process checkpoint before DeepSpeed reads it.
``plain ROOT`` (1 process): an unsharded model and an FSDP2 model load it (another world
size).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accel_state import ConfigurationError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel import FullyShardedDataParallelPlugin
from accel.utils import DeepSpeedPlugin


def build(accelerator: Accelerator, seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(TensorDataset(torch.randn(16, 8)), batch_size=4)  # sets the micro batch
    model, optimizer, _ = accelerator.prepare(model, optimizer, loader)
    return model, optimizer


def step(accelerator: Accelerator, model, optimizer, index: int) -> None:
    gen = torch.Generator().manual_seed(10 * index + accelerator.process_index)
    accelerator.backward(model(torch.randn(4, 8, generator=gen)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()


def weights(accelerator: Accelerator, model) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone()
            for k, v in accelerator.unwrap_model(model).state_dict().items()}


def save_phase(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model, optimizer = build(accelerator, seed=0)
    for index in range(2):
        step(accelerator, model, optimizer, index)
    accelerator.save_state(root / "ds")
    at_save = weights(accelerator, model)
    step(accelerator, model, optimizer, 2)
    if accelerator.is_main_process:
        save_file(at_save, root / "at_save.safetensors")
        save_file(weights(accelerator, model), root / "after.safetensors")
    print(f"DS-SAVED rank={accelerator.process_index}", flush=True)


def load_phase(root: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer = build(accelerator, seed=1)
    accelerator.load_state(root / "ds")
    equal = all(torch.equal(v, load_file(root / "at_save.safetensors")[k])
                for k, v in weights(accelerator, model).items())
    step(accelerator, model, optimizer, 2)
    after = load_file(root / "after.safetensors")
    following = all(torch.allclose(v, after[k], rtol=1e-5, atol=1e-6)
                    for k, v in weights(accelerator, model).items())
    print(f"DS-INTO-DDP rank={accelerator.process_index} equal={equal} next={following} "
          f"engine={type(model).__name__}", flush=True)


def plain_phase(root: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer = build(accelerator, seed=2)
    accelerator.load_state(root / "ds")
    saved = load_file(root / "at_save.safetensors")
    equal = all(torch.equal(v, saved[k]) for k, v in weights(accelerator, model).items())
    moments = sorted(next(iter(optimizer.state.values())))
    print(f"DS-INTO-PLAIN equal={equal} state={moments}", flush=True)
    fsdp = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    model, optimizer = build(fsdp, seed=4)
    fsdp.load_state(root / "ds")  # FSDP2 over one process: the full state cut into shards
    sharded = isinstance(next(model.parameters()), DTensor)
    equal = all(torch.equal(v.full_tensor() if isinstance(v, DTensor) else v, saved[k])
                for k, v in model.state_dict().items())
    print(f"DS-INTO-FSDP sharded={sharded} equal={equal}", flush=True)


def one_engine_phase(root: Path) -> None:
    accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model, optimizer = build(accelerator, seed=3)
    before = weights(accelerator, model)
    try:
        accelerator.load_state(root / "ds")
        print("DS-1-ACCEPTED", flush=True)
    except ConfigurationError as exc:
        unchanged = all(torch.equal(v, before[k]) for k, v in weights(accelerator, model).items())
        print(f"DS-1-REFUSED named={'partitioned over 2 process(es)' in str(exc)} "
              f"unchanged={unchanged}", flush=True)


if __name__ == "__main__":
    phases = {"save": save_phase, "load": load_phase, "plain": plain_phase,
              "one_engine": one_engine_phase}
    phases[sys.argv[1]](Path(sys.argv[2]))

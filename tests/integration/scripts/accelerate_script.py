"""A training script written for Hugging Face Accelerate, left exactly as a user has it.

tests/integration/test_accelerate_dropin.py makes the one-word change (``accelerate`` ->
``accel`` in the imports) and runs the result with plain ``python``: ``debug_launcher``
forks 2 CPU processes, then ``notebook_launcher`` runs one more check in this process.
Each rank prints ``DROPIN rank=R stopped_at=S batch_size=B`` and the script ends with
``DROPIN-DONE``.
"""

from __future__ import annotations

import torch
from accelerate import (
    Accelerator,
    debug_launcher,
    find_executable_batch_size,
    init_empty_weights,
    notebook_launcher,
)
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType, gather_object, set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def pick_batch_size() -> int:
    """The largest batch size that 'fits': above 16 the step runs out of memory."""
    @find_executable_batch_size(starting_batch_size=64)
    def probe(batch_size: int) -> int:
        if batch_size > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size

    return probe()


def training_function() -> None:
    set_seed(42)
    accelerator = Accelerator(cpu=True)
    state = AcceleratorState()
    assert state.distributed_type == DistributedType.MULTI_CPU, state.distributed_type
    assert state.num_processes == 2 and state.process_index == accelerator.process_index
    assert accelerator.state.mixed_precision == state.mixed_precision == "no"

    with init_empty_weights():  # a model too big to build for real: no memory used
        big = nn.Sequential(nn.Linear(50_000, 50_000), nn.Linear(50_000, 10))
    assert all(p.device.type == "meta" for p in big.parameters())

    batch_size = pick_batch_size()
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    stopped_at = None
    for step, (inputs, targets) in enumerate(loader):
        loss = nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step == 1 and accelerator.process_index == 1:  # only rank 1 wants to stop
            accelerator.set_trigger()
        if accelerator.check_trigger():
            stopped_at = step
            break
    everyone = gather_object([stopped_at])
    assert everyone == [1, 1], everyone  # both ranks stopped at the same step
    print(f"DROPIN rank={accelerator.process_index} stopped_at={stopped_at} "
          f"batch_size={batch_size}", flush=True)


def single_process_function() -> None:
    state = PartialState()
    assert state.num_processes == 1 and state.distributed_type == DistributedType.NO
    print("DROPIN notebook single process", flush=True)


if __name__ == "__main__":
    debug_launcher(training_function, num_processes=2)
    notebook_launcher(single_process_function, num_processes=1)
    print("DROPIN-DONE", flush=True)

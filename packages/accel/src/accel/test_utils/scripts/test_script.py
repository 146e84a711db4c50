"""`accel test`'s end-to-end check, launched under the current config on every process.

Also accel's own version of the script Accelerate bundles at this path (its tests start it
with ``accelerate launch .../test_script.py`` and no arguments, or call ``main`` through
``debug_launcher``). In one launch:

* accel's checks under the launched configuration (any strategy and precision): the process
  state agrees with the launcher's topology; gather/broadcast/reduce give the expected values;
  a prepared loader shards without overlap and ``gather_for_metrics`` returns exactly the
  dataset; a few steps give the same weights as one process on the whole batch, within the
  precision's tolerance;
* Accelerate's checks (:mod:`._process_checks`, :mod:`._training_checks`): the state builds
  twice; ``main_process_first`` and the ``on_*`` decorators; ``split_between_processes``; RNG
  synchronisation; loaders prepared with ``prepare_data_loader`` (sharded, split, dispatched,
  iterable, a custom batch sampler); the seedable sampler; N processes train exactly the model
  one process trains (1e-6; no split, split batches, bf16), under DDP or one process; the
  breakpoint trigger; the error after ``AcceleratorState._reset_state()``.

Prints a success line on the main process; any failure raises (exit status non-zero).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.test_utils.scripts import _process_checks as process
from accel.test_utils.scripts import _training_checks as training
from accel.utils import DistributedType, broadcast, gather, reduce, set_seed


def check_state(accelerator: Accelerator) -> None:
    state = accelerator.state
    assert 0 <= state.process_index < state.num_processes, state
    assert state.is_main_process == (state.process_index == 0)
    accelerator.print(f"state: {state.num_processes} process(es), {state.distributed_type.value}, "
                      f"device {accelerator.device}, mixed precision {accelerator.mixed_precision}")


def check_collectives(accelerator: Accelerator) -> None:
    n, rank = accelerator.num_processes, accelerator.process_index
    mine = torch.tensor([float(rank)], device=accelerator.device)
    assert gather(mine).cpu().tolist() == [float(r) for r in range(n)], "gather"
    sent = torch.tensor([float(rank + 42)], device=accelerator.device)
    assert broadcast(sent, from_process=0).item() == 42.0, "broadcast"
    assert reduce(mine.clone(), reduction="sum").item() == float(sum(range(n))), "reduce"
    accelerator.print("collectives: gather, broadcast, reduce ok")


def check_data(accelerator: Accelerator) -> None:
    size = 7 * accelerator.num_processes + 3  # uneven on purpose
    data = TensorDataset(torch.arange(size, dtype=torch.float32))
    loader = accelerator.prepare(DataLoader(data, batch_size=2))
    seen = []
    for (batch,) in loader:
        seen.append(accelerator.gather_for_metrics(batch))
    values = sorted(torch.cat(seen).cpu().tolist())
    assert values == [float(i) for i in range(size)], f"gather_for_metrics gave {values}"
    accelerator.print(f"data: {size} items sharded over {accelerator.num_processes} process(es)")


#: how far a few steps in each precision may land from the fp32 reference: bf16 keeps 8
#: bits of mantissa (DeepSpeed also holds the weights in it), fp16 11, fp8 3-4
TOLERANCE = {"no": 1e-5, "fp16": 5e-3, "bf16": 3e-2, "fp8": 1e-1}


def check_training(accelerator: Accelerator) -> None:
    set_seed(0)
    x = torch.randn(8 * accelerator.num_processes, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    reference = torch.nn.Linear(4, 1)
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(reference.state_dict())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for _ in range(3):
        for xb, yb in loader:
            opt.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
            opt.step()
        ref_opt.zero_grad()  # one process, the whole batch: the same step
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    # the full weights whatever holds them (FSDP2 shards, a DeepSpeed engine); some
    # strategies gather them on the main process only
    state = accelerator.get_state_dict(model)
    precision = accelerator.mixed_precision
    atol = TOLERANCE.get(precision, TOLERANCE["fp8"])
    if state:
        got = state["weight"].detach().float().cpu()
        assert torch.allclose(got, reference.weight.detach(), atol=atol), (
            f"after 3 steps in {precision} the weights are {got.tolist()}, the single-process "
            f"fp32 reference {reference.weight.tolist()} (atol {atol})")
    accelerator.print(f"training: distributed steps match single-process steps ({precision}, "
                      f"atol {atol})")


def accel_checks(accelerator: Accelerator) -> None:
    check_state(accelerator)
    check_collectives(accelerator)
    check_data(accelerator)
    check_training(accelerator)


def accelerate_checks(accelerator: Accelerator) -> None:
    """Accelerate's test_script, in its order (one machine: all processes are local)."""
    state = accelerator.state
    say = accelerator.print
    say("**Initialization**")
    process.init_state_check()
    state.wait_for_everyone()
    say("\n**Test process execution**")
    process.process_execution_check()
    say("\n**Test split between processes as a list, a dict, a tensor, evenly**")
    process.split_between_processes_check()
    say("\n**Test split between processes as a datasets.Dataset**")
    process.split_datasets_check()
    say("\n**Test random number generator synchronization**")
    process.rng_sync_check()
    say("\n**DataLoader integration test**")
    process.dataloader_sharding_check()
    process.custom_sampler_check()
    training.seedable_sampler_check()
    if state.num_processes > 1:
        training.seedable_sampler_in_shard_check()
    if state.distributed_type == DistributedType.DEEPSPEED:
        return  # as in Accelerate: DeepSpeed's training differs from the CPU reference
    if state.distributed_type != DistributedType.FSDP:  # sharded weights: accel_checks's
        say("\n**Training integration test**")
        training.training_check(use_seedable_sampler=False)
        training.training_check(use_seedable_sampler=True)
    say("\n**Breakpoint trigger test**")
    training.trigger_check()
    say("\n**Test reinstantiated state**")
    training.reinstantiated_state_check()


def main() -> None:
    accelerator = Accelerator()
    accel_checks(accelerator)
    accelerator.wait_for_everyone()
    accelerate_checks(accelerator)
    accelerator = Accelerator()  # the last check reset the state
    accelerator.wait_for_everyone()
    accelerator.print("Test is a success! You are ready for your distributed training!")
    accelerator.end_training()


if __name__ == "__main__":
    main()

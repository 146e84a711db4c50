"""Training-level checks of ``test_script``: the seedable sampler, N processes training the
same model as one process on the whole batch (Accelerate's tolerance, 1e-6), the breakpoint
trigger, and the error after the state was reset under an Accelerator.

Each function raises ``AssertionError`` naming what differed; ``test_script.main`` runs them.
"""

from __future__ import annotations

from typing import Any

import torch
from accel_state.errors import ConfigurationError
from torch.utils.data import DataLoader

from accel import Accelerator, PartialState
from accel.data_loader import SeedableRandomSampler, prepare_data_loader
from accel.state import AcceleratorState
from accel.test_utils.testing import are_the_same_tensors
from accel.test_utils.training import RegressionDataset, RegressionModel
from accel.utils import DataLoaderConfiguration, set_seed

#: Accelerate's tolerance for "the same model" (fp32, and bf16/fp16 autocast, which leaves
#: the regression model's elementwise ops in fp32)
ATOL = RTOL = 1e-6


def baseline_loader(dataset: Any, generator: torch.Generator, batch_size: int,
                    seedable: bool = False) -> DataLoader:
    """A shuffling loader drawing from ``generator``; ``seedable``: through a
    ``SeedableRandomSampler`` instead of the loader's own ``RandomSampler``."""
    if seedable:
        sampler = SeedableRandomSampler(generator=generator, data_source=dataset,
                                        num_samples=len(dataset))
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)


def _epochs_of_x(loader: Any, epochs: int = 3) -> torch.Tensor:
    return torch.cat([batch["x"] for _ in range(epochs) for batch in loader])


def seedable_sampler_check() -> None:
    """The same seed and epoch give the same order; another ``data_seed`` another one."""
    set_seed(42)
    loader = DataLoader(RegressionDataset(length=10, seed=42), batch_size=2, shuffle=True)
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    prepared = accelerator.prepare(loader)
    first = _epochs_of_x(prepared)
    set_seed(42)
    prepared.set_epoch(0)
    again = _epochs_of_x(prepared)
    assert torch.allclose(first, again), f"same seed and epoch, other items: {first} {again}"

    orders = []
    for data_seed in (42, 43):
        set_seed(42)
        config = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=data_seed)
        orders.append(_epochs_of_x(Accelerator(dataloader_config=config).prepare(loader)))
    assert not torch.allclose(*orders), "data_seed 42 and 43 gave the same items"


def seedable_sampler_in_shard_check() -> None:
    """With several processes the sharded batch sampler draws from a SeedableRandomSampler."""
    set_seed(42)
    Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    prepared = prepare_data_loader(DataLoader(list(range(10)), batch_size=1, shuffle=True),
                                   use_seedable_sampler=True)
    sampler = prepared.batch_sampler.batch_sampler.sampler
    assert isinstance(sampler, SeedableRandomSampler), (
        f"the sharded batch sampler draws from {type(sampler).__name__}")


def _train(accelerator: Accelerator | None, loader: Any, generator: torch.Generator
           ) -> RegressionModel:
    """3 epochs of SGD(lr=0.1) on the regression model, seeded as Accelerate's script does;
    through ``accelerator`` when given, else plainly."""
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if accelerator is not None:
        loader, model, optimizer = accelerator.prepare(loader, model, optimizer)
    set_seed(42)
    generator.manual_seed(42)
    for _ in range(3):
        for batch in loader:
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            if accelerator is None:
                loss.backward()
            else:
                accelerator.backward(loss)
            optimizer.step()
    return model if accelerator is None else accelerator.unwrap_model(model).cpu()


def _same_model(reference: RegressionModel, model: RegressionModel, how: str) -> None:
    for name in ("a", "b"):
        torch.testing.assert_close(
            getattr(reference, name), getattr(model, name), atol=ATOL, rtol=RTOL,
            msg=lambda msg, n=name: f"{how}: parameter {n} differs from one process's.\n{msg}")


def training_check(use_seedable_sampler: bool = False) -> None:
    """N processes × batch 8 (and one split batch of 8·N, and bf16 autocast) train the model
    one process trains on batches of 8·N, drawing the same shuffled order."""
    state = AcceleratorState()
    n = state.num_processes
    generator = torch.Generator()
    batch_size = 8
    set_seed(42)
    generator.manual_seed(42)
    dataset = RegressionDataset(length=batch_size * 4 * n, seed=42)
    reference = _train(None, baseline_loader(dataset, generator, batch_size * n,
                                             use_seedable_sampler), generator)
    assert are_the_same_tensors(reference.a) and are_the_same_tensors(reference.b), (
        "the one-process reference differs between processes")
    mode = f"use_seedable_sampler={use_seedable_sampler}"

    model = _train(Accelerator(), baseline_loader(dataset, generator, batch_size,
                                                  use_seedable_sampler), generator)
    _same_model(reference, model, f"{n} processes, no batch split, {mode}")
    state.print("Training yielded the same results on one CPU or distributed setup with no "
                "batch split.")

    config = DataLoaderConfiguration(split_batches=True, use_seedable_sampler=use_seedable_sampler)
    model = _train(Accelerator(dataloader_config=config),
                   baseline_loader(dataset, generator, batch_size * n, use_seedable_sampler),
                   generator)
    _same_model(reference, model, f"{n} processes, split batches, {mode}")
    state.print("Training yielded the same results on one CPU or distributed setup with batch "
                "split.")

    for precision in ("bf16", "fp16"):
        AcceleratorState._reset_state()
        config = DataLoaderConfiguration(use_seedable_sampler=use_seedable_sampler)
        try:
            accelerator = Accelerator(mixed_precision=precision, dataloader_config=config)
        except ConfigurationError as refused:  # a strategy that cannot run it (DS fp16 on CPU)
            PartialState().print(f"{precision.upper()} training check skipped: {refused}")
            continue
        accelerator.print(f"{precision.upper()} training check.")
        model = _train(accelerator, baseline_loader(dataset, generator, batch_size,
                                                    use_seedable_sampler), generator)
        _same_model(reference, model, f"{n} processes in {precision}, {mode}")
    AcceleratorState._reset_state()
    Accelerator()  # leave the default state behind for the checks that follow


def trigger_check() -> None:
    """``set_trigger`` on the main process is seen by ``check_trigger`` on every process,
    once (the check resets it)."""
    accelerator = Accelerator()
    assert accelerator.check_trigger() is False, "the trigger starts set"
    if accelerator.is_main_process:
        accelerator.set_trigger()
    assert accelerator.check_trigger() is True, "the main process's trigger was not seen"
    assert accelerator.check_trigger() is False, "the trigger was not reset by the check"


def reinstantiated_state_check() -> None:
    """After ``AcceleratorState._reset_state()`` an existing Accelerator's ``prepare`` fails
    early with an AttributeError that says why."""
    AcceleratorState._reset_state()
    accelerator = Accelerator()
    AcceleratorState._reset_state()
    try:
        accelerator.prepare(torch.nn.Linear(1, 1))
    except AttributeError as error:
        message = str(error.args[0])
    else:
        raise AssertionError("prepare after AcceleratorState._reset_state() did not fail")
    assert "`AcceleratorState` object has no attribute" in message, message
    assert "This happens if `AcceleratorState._reset_state()`" in message, message

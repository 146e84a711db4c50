"""DDP's extras in 2 processes: LocalSGD, join_uneven_inputs, and gradient compression hooks.

Prints one "ok <check>" line per passed check (the test counts them). Arguments, if any,
are ddp_equivalence.py's: that run follows in the same processes (one launch for both).
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DDPCommunicationHookType, DistributedDataParallelKwargs
from accel.local_sgd import LocalSGD


def _ok(check: str) -> None:
    """One write per line: both ranks share stdout, and print writes the newline apart."""
    sys.stdout.write(f"ok {check}\n")
    sys.stdout.flush()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_local_sgd(accelerator: Accelerator) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.Generator().manual_seed(100 + accelerator.process_index)  # different per rank
    with LocalSGD(accelerator, model, local_sgd_steps=2) as local_sgd:
        for step in (1, 2, 3):
            loss = model(torch.randn(8, 4, generator=data)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            local = accelerator.gather(_flat(model)[None])  # every rank's own parameters
            local_sgd.step()
            after = accelerator.gather(_flat(model)[None])
            if step == 1:  # no gradient all-reduce, no average yet: the replicas drifted apart
                assert not torch.allclose(after[0], after[1]), "gradients were synchronised"
            if step == 2:  # averaged: every replica holds the mean of the local parameters
                torch.testing.assert_close(after[0], after[1])
                torch.testing.assert_close(after[0], local.mean(dim=0))
    # leaving the block averages once more
    final = accelerator.gather(_flat(model)[None])
    torch.testing.assert_close(final[0], final[1])
    _ok("local_sgd")


def check_join_uneven_inputs(accelerator: Accelerator) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(10, 4)), batch_size=2)  # 5 batches
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = 0
    with accelerator.join_uneven_inputs([model], even_batches=False):
        assert loader.even_batches is False
        for (x,) in loader:  # rank 0: 3 batches, rank 1: 2 (no padding)
            loss = model(x).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            batches += 1
    assert loader.even_batches is True, "the loader's setting was not restored"
    assert batches == (3 if accelerator.process_index == 0 else 2), batches
    # DDP's join hook leaves every replica with the last joiner's parameters
    params = accelerator.gather(_flat(model)[None])
    torch.testing.assert_close(params[0], params[1])
    _ok("join_uneven_inputs")


def _train_with_hook(hook: DDPCommunicationHookType, **options: object) -> torch.Tensor:
    handler = DistributedDataParallelKwargs(comm_hook=hook, **options)
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.Generator().manual_seed(7 + accelerator.process_index)
    for _ in range(3):
        loss = model(torch.randn(8, 4, generator=data)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return _flat(model)


def check_comm_hooks() -> None:
    reference = _train_with_hook(DDPCommunicationHookType.NO)
    for hook in (DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16):
        torch.testing.assert_close(_train_with_hook(hook), reference, rtol=2e-2, atol=2e-2)
        _ok(f"comm_hook {hook.value}")
    # PowerSGD compresses (rank-1 approximation after the first step): it trains, differently
    power = _train_with_hook(DDPCommunicationHookType.POWER_SGD,
                             comm_state_option={"matrix_approximation_rank": 1,
                                                "start_powerSGD_iter": 2})
    assert torch.isfinite(power).all()
    _ok("comm_hook power_sgd")


def main() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == 2
    check_local_sgd(accelerator)
    check_join_uneven_inputs(accelerator)
    check_comm_hooks()
    if len(sys.argv) > 1:  # last: its Accelerator compiles (dynamo) and accumulates
        import ddp_equivalence  # this folder: the script's own, first on sys.path

        ddp_equivalence.main(sys.argv[1:])
        _ok("ddp_equivalence saved")


if __name__ == "__main__":
    main()

"""fp16 under DDP, run by `accel launch --cpu --num_processes 2 --mixed_precision fp16`.

Each rank checks: the launcher's precision reached the Accelerator, a differing argument
wins with a warning naming both values, forward runs in fp16 inside DDP, a nan on one rank
skips the step on every rank (DDP averages it into everyone's gradients) and halves the scale everywhere, parameters stay
identical across ranks, and training then learns. Prints CHECKS-OK rank=N at the end.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from accel import Accelerator, GradScalerKwargs


def main() -> None:
    with warnings.catch_warnings(record=True) as caught:  # the code wins, as in Accelerate
        warnings.simplefilter("always")
        assert Accelerator(cpu=True, mixed_precision="bf16").mixed_precision == "bf16"
    said = [str(w.message) for w in caught if "overrides" in str(w.message)]
    assert said and "MIXED_PRECISION=fp16" in said[0] and "'bf16'" in said[0], said
    accelerator = Accelerator(cpu=True, kwargs_handlers=[GradScalerKwargs(init_scale=2.0 ** 8)])
    rank = accelerator.process_index
    assert accelerator.num_processes == 2 and accelerator.mixed_precision == "fp16"

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    inner = model
    dtypes: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: dtypes.append(out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert isinstance(model, nn.parallel.DistributedDataParallel)

    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(32, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)

    # a nan batch on rank 1 only: DDP spreads the nan, so both ranks must skip
    bad = x.clone()
    if rank == 1:
        bad[0, 0] = float("nan")
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(nn.functional.mse_loss(model(bad), y))
    optimizer.step()
    assert dtypes[-1] == torch.float16, dtypes
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert accelerator.scaler.get_scale() == 2.0 ** 7

    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        out = model(x)
        assert out.dtype == torch.float32
        loss = nn.functional.mse_loss(out, y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
    assert not accelerator.optimizer_step_was_skipped
    assert losses[-1] < 0.5 * losses[0], losses
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = accelerator.gather(flat[None])
    assert torch.equal(gathered[0], gathered[1]), "parameters diverged across ranks"

    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert plain is inner and not hasattr(plain, "_original_forward")
    assert plain(x).dtype == torch.float32 and dtypes[-1] == torch.float32
    print(f"CHECKS-OK rank={rank}", flush=True)


if __name__ == "__main__":
    main()

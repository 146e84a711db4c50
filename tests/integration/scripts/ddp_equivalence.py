"""Train a few steps and save the initial and final parameters (rank 0) to argv[1].

With N processes, per-process batch B and A accumulated batches per step, data-parallel
training must give the same parameters as 1 process with batch N*B*A: the test runs both
and compares (the accumulating run also exercises DDP's no_sync, and with
``--dynamo-backend`` a compiled DDP model). ddp_extras.py runs it at the end of its launch
(``main(argv)``): the 2-process run has no launch of its own.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps")
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--dynamo-backend", default=None,
                        help="compile the prepared model (torch.compile of the DDP wrapper)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    x = torch.randn(96, 6)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accumulation_steps,
                              dynamo_backend=args.dynamo_backend)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if args.dynamo_backend:
        assert type(model).__name__ == "OptimizedModule", type(model)
        assert accelerator.unwrap_model(model, keep_torch_compile=False) is not model
    steps = 0
    while steps < args.steps:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                if accelerator.num_processes > 1:  # micro-steps must skip DDP's all-reduce
                    assert model.require_backward_grad_sync == accelerator.sync_gradients
                loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            steps += accelerator.sync_gradients
            if steps == args.steps:
                break
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    final = {k: v.clone() for k, v in unwrapped.state_dict().items()}
    accelerator.save({"initial": initial, "final": final}, args.output)


if __name__ == "__main__":
    main()

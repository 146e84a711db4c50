"""Shared by tp_checks.py and nd_checks.py: a tiny model with a tensor-parallel plan, its
data, a training loop through the Accelerator, and the single-process reference that sees
the same global batches (recorded on every rank and gathered)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    """inp -> 2 residual MLP blocks -> out; the blocks are tensor parallel (transformers'
    plan form), inp/out stay whole (sharded by FSDP only, when it runs)."""

    _tp_plan = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
    _no_split_modules = ["MLP"]

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.blocks = nn.ModuleList([MLP(), MLP()])
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


def data(n: int = 32) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=generator)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


def loss_of(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    return nn.functional.binary_cross_entropy_with_logits(model(xb), yb)


def train(accelerator, model: nn.Module, steps_per_sync: int = 1, epochs: int = 1,
          clip: float = 0.5) -> dict:
    """Train through ``accelerator``; returns the batches this rank saw (per optimizer
    step), the clipped norms, the prepared objects and the full state dict."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                   DataLoader(data(), batch_size=4, shuffle=True))
    batches, norms, current = [], [], []
    for _ in range(epochs):
        for xb, yb in loader:
            with accelerator.accumulate(model):
                current.append((xb.clone(), yb.clone()))
                accelerator.backward(loss_of(model, xb, yb))
                if accelerator.sync_gradients:
                    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), clip)))
                    batches.append(current)
                    current = []
                optimizer.step()
                optimizer.zero_grad()
    return {"model": model, "optimizer": optimizer, "batches": batches, "norms": norms,
            "full": accelerator.get_state_dict(model), "loader": loader}


def global_batches(accelerator, batches: list) -> list:
    """Per optimizer step, the micro-batches of every data-parallel replica, in dp order;
    also checks that processes with the same dp rank (a TP group) saw the same batches."""
    seen = [None] * accelerator.num_processes
    dist.all_gather_object(seen, (accelerator.strategy.dp_rank, batches))
    by_dp: dict[int, list] = {}
    for dp_rank, theirs in seen:
        if dp_rank in by_dp:
            mine = by_dp[dp_rank]
            assert len(mine) == len(theirs)
            for a, b in zip(mine, theirs, strict=True):
                for (xa, ya), (xb, yb) in zip(a, b, strict=True):
                    assert torch.equal(xa, xb) and torch.equal(ya, yb), "TP group batches differ"
        by_dp[dp_rank] = theirs
    assert sorted(by_dp) == list(range(accelerator.strategy.dp_size)), sorted(by_dp)
    steps = len(by_dp[0])
    return [[micro for d in sorted(by_dp) for micro in by_dp[d][k]] for k in range(steps)]


def reference(steps: list, clip: float = 0.5) -> dict:
    """The same model trained in one process: per step the mean loss over the replicas'
    micro-batches (what averaging over dp and accumulation computes)."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    norms = []
    for micro in steps:
        loss = sum(loss_of(model, xb, yb) for xb, yb in micro) / len(micro)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        optimizer.step()
        optimizer.zero_grad()
    return {"model": model, "norms": norms, "full": model.state_dict()}


def compare(name: str, accelerator, got: dict, expected: dict) -> None:
    torch.testing.assert_close(torch.tensor(got["norms"]), torch.tensor(expected["norms"]),
                               rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} norms: {m}")
    if accelerator.is_main_process:
        assert set(got["full"]) == set(expected["full"]), (name, sorted(got["full"]))
        for key, value in expected["full"].items():
            torch.testing.assert_close(got["full"][key], value, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, k=key: f"{name} {k}: {m}")

"""Third-party strategies (tests/plugins, registered through the ``accel.strategies`` entry
point) driving the unchanged facade, in 2 processes. argv[1]: a scratch directory.

1. ``test-engine``: an engine that owns backward, the gradient reduction and the step.
   Data-parallel training with accumulation through it must give the parameters of one
   process training on the whole batch; save_state/load_state round-trips through it.
2. ``test-replicated-data``: each process is a data-parallel group of one. Every process
   reads the whole dataset, ``gather_for_metrics`` returns it exactly once, and the
   scheduler steps once per optimizer step (not once per process).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
sys.path.insert(0, str(PLUGINS))  # "installs" accel_test_engine for importlib.metadata

import torch  # noqa: E402
from accel import Accelerator  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


def _data(n: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=generator)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))


def _reference(data: TensorDataset, batch: int, accumulation: int) -> dict[str, torch.Tensor]:
    """One process, the whole global batch per micro-step, plain torch."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for i, (xb, yb) in enumerate(DataLoader(data, batch_size=batch)):
        loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb) / accumulation
        loss.backward()
        if (i + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
    return model.state_dict()


def engine_checks(scratch: Path) -> None:
    os.environ["ACCEL_STRATEGY"] = "test-engine"
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    assert type(accelerator.strategy).__name__ == "EngineStrategy", accelerator.strategy
    user_model = _model()
    data = _data(64)
    model, optimizer, loader = accelerator.prepare(
        user_model, torch.optim.SGD(user_model.parameters(), lr=0.5),
        DataLoader(data, batch_size=4))
    engine = accelerator.strategy.engine
    assert model is engine and accelerator.unwrap_model(model) is user_model
    for xb, yb in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.binary_cross_entropy_with_logits(model(xb), yb))
            optimizer.step()
            optimizer.zero_grad()
    assert engine.backward_calls == len(loader) == 8, (engine.backward_calls, len(loader))
    assert engine.steps == engine.reductions == 4, (engine.steps, engine.reductions)
    expected = _reference(data, batch=4 * accelerator.num_processes, accumulation=2)
    for name, value in accelerator.unwrap_model(model).state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-5, atol=1e-6)
    saved = {k: v.clone() for k, v in user_model.state_dict().items()}
    path = accelerator.save_state(scratch / "engine")
    with torch.no_grad():
        for parameter in user_model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(path)
    for name, value in user_model.state_dict().items():
        assert torch.equal(value, saved[name]), name
    print(f"ENGINE-OK rank={accelerator.process_index}", flush=True)


def topology_checks() -> None:
    os.environ["ACCEL_STRATEGY"] = "test-replicated-data"
    accelerator = Accelerator(cpu=True)
    strategy = accelerator.strategy
    assert (strategy.dp_size, strategy.parallel_sizes["tp"]) == (1, 2), strategy.parallel_sizes
    data = _data(10)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    model, optimizer, loader, scheduler = accelerator.prepare(
        model, optimizer, DataLoader(data, batch_size=4), scheduler)
    rows = []
    for xb, _ in loader:  # 3 batches: the whole dataset on every process
        rows.append(accelerator.gather_for_metrics(xb))
        model(xb).sum().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    gathered = torch.cat(rows)
    assert torch.equal(gathered, data.tensors[0]), gathered.shape
    assert scheduler.scheduler.last_epoch == 3, scheduler.scheduler.last_epoch
    print(f"TOPOLOGY-OK rank={accelerator.process_index}", flush=True)


if __name__ == "__main__":
    engine_checks(Path(sys.argv[1]))
    topology_checks()

"""Load the Accelerate checkpoints in tests/fixtures/accelerate_checkpoints (written by
accelerate 1.15's save_state in 2 processes) with the same objects, and compare with what
that run recorded: weights, optimizer and scheduler states, the custom object, the step,
and each rank's next random draws (its RNG states were restored). Prints "ok <kind>"."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import torch

from accel import Accelerator

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "accelerate_checkpoints"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]


def check(kind: str) -> None:
    accelerator = Accelerator(cpu=True)
    models = [torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)),
              torch.nn.Linear(2, 2)]
    optimizers = [torch.optim.AdamW(models[0].parameters(), lr=0.01),
                  torch.optim.SGD(models[1].parameters(), lr=0.1, momentum=0.9)]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=1, gamma=0.5)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    *models, scheduler = accelerator.prepare(*models, scheduler)
    optimizers = [accelerator.prepare(o) for o in optimizers]
    accelerator.load_state(str(FIXTURES / kind))
    expected = torch.load(FIXTURES / f"expected-{kind}-rank{accelerator.process_index}.pt",
                          weights_only=True)
    for model, state in zip(models, expected["models"], strict=True):
        torch.testing.assert_close(accelerator.unwrap_model(model).state_dict(), state)
    for optimizer, state in zip(optimizers, expected["optimizers"], strict=True):
        torch.testing.assert_close(optimizer.state_dict(), state)
    assert scheduler.state_dict() == expected["scheduler"], scheduler.state_dict()
    assert counter.n == expected["counter"] and accelerator.step == expected["step"]
    draws = expected["draws"]
    assert random.random() == draws["python"]
    assert float(np.random.rand()) == draws["numpy"]
    torch.testing.assert_close(torch.rand(3), draws["torch"], rtol=0, atol=0)
    sys.stdout.write(f"ok {kind}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    for kind in ("safetensors", "bin"):
        check(kind)

"""Run by tests/integration/test_tracking.py in 2 processes through `accel launch --cpu`.

Trains a tiny model while logging to TensorBoard, wandb (offline) and MLflow (sqlite) at
once, plus two script trackers: one that logs on every process and one whose backend
is down. Prints ``TRACKING-OK rank=<r>`` when the run completed on that rank.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accel import Accelerator
from accel.tracking import GeneralTracker
from accel.utils import tqdm

out = Path(sys.argv[1])


class PerRank(GeneralTracker):
    """Logs on every process (main_process_only = False): one file per rank."""

    name = "per_rank"
    main_process_only = False

    def __init__(self, directory: Path):
        super().__init__()
        self.directory, self.rows = directory, []

    def log(self, values, step=None, **kwargs):
        self.rows.append({"step": step, **values})

    def finish(self):
        from accel_state import PartialState

        rank = PartialState().process_index
        (self.directory / f"per_rank_{rank}.json").write_text(json.dumps(self.rows))


class Down(GeneralTracker):
    """A backend that is unreachable: every log raises."""

    name = "down"

    def log(self, values, step=None, **kwargs):
        raise ConnectionError("tracking server unreachable")


accelerator = Accelerator(cpu=True, project_dir=out,
                          log_with=["tensorboard", "wandb", "mlflow", PerRank(out), Down()])
accelerator.init_trackers("demo", config={"lr": 0.1, "batch_size": 4}, init_kwargs={
    "wandb": {"dir": str(out)},
    "mlflow": {"tracking_uri": f"sqlite:///{out}/mlflow.db", "logging_dir": str(out / "art")},
})
rank = accelerator.process_index
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
data = torch.randn(16, 4)
target = data.sum(dim=1, keepdim=True)
bar = tqdm(range(4), desc="tracked-training", mininterval=600)  # draws at start and end only
print(f"BAR rank={rank} disabled={bar.disable}", flush=True)
for step in bar:
    loss = torch.nn.functional.mse_loss(model(data), target)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.log({"loss": loss.item(), "step_x10": step * 10}, step=step)
raw = accelerator.get_tracker("wandb", unwrap=True)
print(f"RAW rank={rank} wandb={'run' if raw is not None else None}", flush=True)
accelerator.end_training()
print(f"TRACKING-OK rank={rank}", flush=True)

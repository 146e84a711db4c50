"""Experiment tracking: log hyperparameters and metrics once per job, from any number of processes.

Run it on 2 CPU processes (TensorBoard installed: ``pip install "accel-tracking[tensorboard]"``):

    uv run accel launch --num_processes 2 --cpu examples/tracking.py --project-dir runs/tracking
    uv run tensorboard --logdir runs/tracking     # then open the printed address

``Accelerator(log_with=[...], project_dir=...)`` names the trackers: built-in ones by name
("tensorboard", "wandb", "mlflow", ...) and your own as instances. ``init_trackers`` starts
one run and stores the hyperparameters; ``log`` sends metrics; ``end_training`` finishes the
runs. Only the main process writes, so 2 processes make one run, not two. The example's own
tracker, ``JsonLinesTracker``, writes ``<project-dir>/<project>.jsonl`` with no dependency:
``--tracker jsonl`` uses it alone (no TensorBoard needed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from accel import Accelerator
from accel.tracking import GeneralTracker, on_main_process
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class JsonLinesTracker(GeneralTracker):
    """A local tracker: one JSON object per ``log`` call, the config as the first line."""

    name = "jsonlines"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | Path, **kwargs: Any) -> None:
        super().__init__()
        self.path = Path(logging_dir) / f"{run_name}.jsonl"
        self.file: Any = None

    @property
    def tracker(self) -> Any:
        return self.file

    @on_main_process
    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("w")

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.file.write(json.dumps({"config": values}) + "\n")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.file.write(json.dumps({"step": step, **values}) + "\n")

    @on_main_process
    def finish(self) -> None:
        self.file.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--project-dir", default="runs/tracking")
    parser.add_argument("--project", default="example")
    parser.add_argument("--tracker", choices=["tensorboard", "jsonl", "both"], default="both")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()

    trackers: list[Any] = []
    if args.tracker in ("tensorboard", "both"):
        trackers.append("tensorboard")
    if args.tracker in ("jsonl", "both"):
        trackers.append(JsonLinesTracker(args.project, args.project_dir))
    torch.manual_seed(0)
    accelerator = Accelerator(log_with=trackers, project_dir=args.project_dir)
    accelerator.init_trackers(args.project, config={"lr": args.lr, "epochs": args.epochs,
                                                    "processes": accelerator.num_processes})

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(128, 8, generator=generator)
    loader = DataLoader(TensorDataset(x, x.mean(dim=1, keepdim=True)), batch_size=16)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * 10)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            # every process calls log (the mean needs them all); only the main one writes
            mean = accelerator.reduce(loss.detach(), reduction="mean")
            accelerator.log({"train/loss": mean.item(), "epoch": epoch}, step=step)
    accelerator.end_training()
    accelerator.print(f"logged {step} steps to {args.project_dir} with "
                      f"{', '.join(t.name for t in accelerator.trackers)}")


if __name__ == "__main__":
    main()

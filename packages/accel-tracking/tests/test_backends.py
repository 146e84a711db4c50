"""Each built-in tracker writes a real run; the test reads the files back (no SDK mocks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from accel_tracking import TrackerGroup, build_trackers
from accel_tracking.testing import (
    read_dvclive_metrics,
    read_mlflow_runs,
    read_tensorboard_scalars,
    read_wandb_offline_runs,
)

CONFIG = {"lr": 0.01, "optimizer": {"name": "adamw", "betas": [0.9, 0.99]}, "epochs": 3}
LOSSES = [1.0, 0.5, 0.25]


def run(tracker_name: str, project: str, run_dir=None, /, **kwargs):
    """Start one tracker strictly (any backend error fails the test), log 3 steps, return it."""
    group = TrackerGroup(build_trackers([tracker_name], project, run_dir,
                                        {tracker_name: kwargs}), strict=True)
    group.start(CONFIG)
    for step, loss in enumerate(LOSSES):
        group.log({"loss": torch.tensor(loss), "lr": 0.01 * (step + 1)}, step=step)
    return group


def test_tensorboard_scalars_steps_text_and_images(tmp_path):
    pytest.importorskip("tensorboard")
    group = run("tensorboard", "proj", tmp_path)
    tracker = group.get("tensorboard")
    group.log({"note": "hello"}, step=3)
    tracker.log_images({"samples": torch.rand(2, 3, 8, 8)}, step=3)
    group.finish()
    run_dir = tmp_path / "proj"
    scalars = read_tensorboard_scalars(run_dir)
    assert [s for s, _ in scalars["loss"]] == [0, 1, 2]
    assert [v for _, v in scalars["loss"]] == pytest.approx(LOSSES)
    assert [v for _, v in scalars["lr"]] == pytest.approx([0.01, 0.02, 0.03])

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert "samples" in events.Tags()["images"] and "note/text_summary" in events.Tags()["tensors"]
    assert json.loads((run_dir / "hparams.json").read_text()) == CONFIG
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1


def test_wandb_offline_run_holds_the_logged_keys(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    group = run("wandb", "proj", dir=str(tmp_path), name="offline-test")
    tracker = group.get("wandb")
    assert group.get("wandb", unwrap=True) is tracker.run
    tracker.log_table("predictions", columns=["x", "y"], data=[[1, 2], [3, 4]], step=3)
    tracker.log_images({"samples": [torch.rand(3, 8, 8).numpy().transpose(1, 2, 0)]}, step=4)
    group.finish()
    (offline,) = read_wandb_offline_runs(tmp_path / "wandb")
    assert offline["id"] == tracker.run.id
    rows = [row for row in offline["history"] if "loss" in row]
    assert [row["_step"] for row in rows] == [0, 1, 2]
    assert [row["loss"] for row in rows] == pytest.approx(LOSSES)
    media = {key: value for row in offline["history"] for key, value in row.items()}
    assert media["predictions"]["_type"] == "table-file" and media["predictions"]["nrows"] == 2
    assert media["samples"]["count"] == 1
    assert (Path(offline["dir"]) / "files" / media["samples"]["filenames"][0]).is_file()
    assert offline["config"]["lr"] == 0.01 and offline["config"]["optimizer"]["name"] == "adamw"


def test_mlflow_sqlite_metrics_and_params_read_back(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    group = run("mlflow", "proj", tracking_uri=uri, logging_dir=str(tmp_path / "artifacts"),
                run_name="first")
    group.log({"text": "not a metric"}, step=3)  # dropped with a warning, not an error
    (tmp_path / "notes.txt").write_text("artifact")
    group.get("mlflow").log_artifact(str(tmp_path / "notes.txt"))
    group.finish()
    (found,) = read_mlflow_runs(uri, "proj")
    assert found["metrics"]["loss"] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert [s for s, _ in found["metrics"]["lr"]] == [0, 1, 2]
    assert "text" not in found["metrics"]
    assert found["params"]["lr"] == "0.01" and found["status"] == "FINISHED"
    assert (tmp_path / "artifacts" / found["run_id"] / "artifacts" / "notes.txt").is_file()


def test_dvclive_metrics_and_params_files(tmp_path, monkeypatch):
    pytest.importorskip("dvclive")
    monkeypatch.chdir(tmp_path)  # DVCLive initialises DVC in the enclosing git repo otherwise
    live_dir = tmp_path / "live"
    group = run("dvclive", "proj", dir=str(live_dir), save_dvc_exp=False, dvcyaml=False)
    group.finish()
    metrics = read_dvclive_metrics(live_dir)
    assert metrics["loss"] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert (live_dir / "params.yaml").read_text().startswith("lr: 0.01")
    assert not (tmp_path / ".dvc").exists() and not os.path.exists("dvc.yaml")


@pytest.mark.parametrize("name", ["comet_ml", "aim", "clearml", "swanlab", "trackio"])
def test_other_backends_start_log_finish_when_installed(name, tmp_path, monkeypatch):
    """Only where the SDK is installed (none is in the development environment)."""
    pytest.importorskip(name)
    monkeypatch.chdir(tmp_path)
    kwargs = {"comet_ml": {"online": False}, "clearml": {}, "aim": {}, "swanlab":
              {"mode": "offline"}, "trackio": {}}[name]
    group = run(name, "proj", tmp_path if name == "aim" else None, **kwargs)
    group.finish()
    assert group.failures() == {}

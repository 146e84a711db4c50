"""Each built-in tracker writes a real run; the test reads the files back (no SDK mocks)."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest
import torch
from accel_tracking import TrackerGroup, build_trackers
from accel_tracking.testing import (
    read_clearml_offline_session,
    read_comet_offline_archives,
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


def test_tensorboard_says_once_on_the_main_process_where_its_event_files_go(tmp_path, caplog,
                                                                             monkeypatch):
    pytest.importorskip("tensorboard")
    with caplog.at_level(logging.INFO, logger="accel.tracking"):
        group = run("tensorboard", "proj", tmp_path / "logs")
        group.finish()
    tracker = group.get("tensorboard")
    assert tracker.logging_dir_param == tmp_path / "logs"  # Accelerate's attribute names
    assert tracker.logging_dir == os.path.join(tmp_path / "logs", "proj")
    said = [r.getMessage() for r in caplog.records if "event files" in r.getMessage()]
    assert said == [f"TensorBoard: event files for run 'proj' go to {tmp_path / 'logs' / 'proj'}"
                    f" (view them with: tensorboard --logdir {tmp_path / 'logs'})"]
    assert list((tmp_path / "logs" / "proj").glob("events.out.tfevents.*"))
    caplog.clear()
    import accel_tracking.base as base

    monkeypatch.setattr(base, "is_main_process", lambda: False)
    with caplog.at_level(logging.INFO, logger="accel.tracking"):
        other = run("tensorboard", "proj", tmp_path / "rank1")
        other.finish()
    assert not caplog.records and not (tmp_path / "rank1").exists()


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
    group.log({"note": "done"}, step=3)
    group.finish()
    metrics = read_dvclive_metrics(live_dir)
    assert metrics["loss"] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert (live_dir / "params.yaml").read_text().startswith("lr: 0.01")
    assert metrics["note"] == [(3, "done")]  # DVCLive records strings too
    assert not (tmp_path / ".dvc").exists() and not os.path.exists("dvc.yaml")


@pytest.fixture
def no_network(monkeypatch):
    """Refuse (and record) every IP connection and name lookup made during the test."""
    attempts: list[object] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(address):
        attempts.append(address)
        raise OSError(f"network access during an offline test: {address!r}")

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            refuse(address)
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            refuse(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        refuse(host)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return attempts


def test_comet_offline_archive_holds_metrics_steps_and_parameters(tmp_path, monkeypatch,
                                                                 no_network):
    # Comet's own variable: on half of its imports comet_ml reports its errors to Sentry.
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")
    comet_ml = pytest.importorskip("comet_ml")
    monkeypatch.chdir(tmp_path)  # Comet's default offline directory is relative
    offline_dir = tmp_path / "comet"
    config = comet_ml.ExperimentConfig(
        offline_directory=str(offline_dir), display_summary_level=0, log_code=False,
        log_git_metadata=False, log_git_patch=False, log_env_details=False,
        auto_output_logging=None)
    group = run("comet_ml", "proj", online=False, experiment_config=config)
    tracker = group.get("comet_ml")
    group.log({"note": "hello", "grouped": {"a": 1, "b": 2}}, step=3)
    group.finish()
    (archive,) = read_comet_offline_archives(offline_dir)
    assert archive["offline_id"] == tracker.writer.id and archive["project_name"] == "proj"
    assert archive["metrics"]["loss"] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert archive["metrics"]["lr"] == [(0, 0.01), (1, 0.02), (2, 0.03)]
    assert archive["metrics"]["a"] == [(3, 1)] and archive["metrics"]["b"] == [(3, 2)]
    params = archive["parameters"]
    assert params["lr"] == 0.01 and params["epochs"] == 3
    assert params["optimizer|name"] == "adamw" and params["optimizer|betas"] == [0.9, 0.99]
    assert archive["others"]["note"] == "hello"
    assert no_network == [] and os.listdir(tmp_path) == ["comet"]


CLEARML_FRAMEWORKS = ["matplotlib", "tensorflow", "tensorboard", "pytorch", "xgboost", "scikit",
                      "fastai", "lightgbm", "hydra", "detect_repository", "tfdefines", "joblib",
                      "megengine", "catboost", "gradio"]  # Task.init's documented keys


def test_clearml_offline_session_holds_scalars_steps_and_configuration(tmp_path, monkeypatch,
                                                                      no_network):
    # ClearML's own variables: its cache (the offline sessions) and a configuration file
    # that keeps the reporter in a thread (its subprocess reporter waits ~10 s on close).
    monkeypatch.setenv("CLEARML_CACHE_DIR", str(tmp_path / "cache"))
    conf = tmp_path / "clearml.conf"
    conf.write_text("sdk { development { report_use_subprocess: false } }\n")
    monkeypatch.setenv("CLEARML_CONFIG_FILE", str(conf))
    pytest.importorskip("clearml")
    monkeypatch.chdir(tmp_path)
    # Bind no framework (ClearML would patch torch.save for the rest of the session) and
    # skip repository detection, which also asks updates.clear.ml for a newer release.
    frameworks = dict.fromkeys(CLEARML_FRAMEWORKS, False)
    group = run("clearml", "proj", offline=True, auto_connect_frameworks=frameworks,
                auto_connect_arg_parser=False, auto_connect_streams=False,
                auto_resource_monitoring=False)
    task = group.get("clearml", unwrap=True)
    group.log({"train/loss": 0.125, "final": 7}, step=None)  # no step: single values
    group.log({"train/loss": 0.5, "eval_acc": 0.75, "test_acc": 0.5}, step=3)
    group.get("clearml").log_table("preds/val", columns=["x", "y"], data=[[1, 2]], step=3)
    group.get("clearml").log_table("rows", data=[["x", "y"], [3, 4]], step=3)  # own header
    folder = Path(task.get_offline_mode_folder())
    group.finish()
    assert folder.parent == tmp_path / "cache" / "offline"
    for stored in (folder, folder.with_suffix(".zip")):
        session = read_clearml_offline_session(stored)
        assert session["id"] == task.id and session["name"] == "proj"
        # Accelerate's layout: a name without a `/` nor an eval_/test_/train_ prefix is
        # series "train"; such a prefix is the series and the rest the title
        assert session["scalars"]["loss"]["train"] == [(0, 1.0), (1, 0.5), (2, 0.25)]
        assert [step for step, _ in session["scalars"]["lr"]["train"]] == [0, 1, 2]
        assert session["scalars"]["train"]["loss"] == [(3, 0.5)]
        assert session["scalars"]["acc"] == {"eval": [(3, 0.75)], "test": [(3, 0.5)]}
        assert session["single_values"] == {"train/loss": 0.125, "final": 7}
        assert session["configuration"]["General"] == CONFIG
    assert no_network == []


@pytest.mark.parametrize("name", ["aim", "swanlab", "trackio"])
def test_other_backends_start_log_finish_when_installed(name, tmp_path, monkeypatch):
    """Only where the SDK is installed (none is in the development environment)."""
    pytest.importorskip(name)
    monkeypatch.chdir(tmp_path)
    kwargs = {"aim": {}, "swanlab": {"mode": "offline"}, "trackio": {}}[name]
    group = run(name, "proj", tmp_path if name == "aim" else None, **kwargs)
    group.finish()
    assert group.failures() == {}


def test_wandb_reader_waits_for_the_exit_record_and_names_what_an_unfinished_file_holds(tmp_path):
    pytest.importorskip("wandb")
    run_dir = tmp_path / "wandb" / "offline-run-20261201_000000-abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "run-abc123.wandb").write_bytes(b":W&B\x00\x00\x00")  # header, no records yet
    with pytest.raises(TimeoutError, match=r"no 'exit' record after 0 s.*holds \[\]"):
        read_wandb_offline_runs(tmp_path / "wandb", timeout=0.2)

"""Trackers through the Accelerator: real files read back; one run per job in 2 processes."""

from __future__ import annotations

import json
import warnings

import pytest
from accel import Accelerator
from accel.tracking import GeneralTracker, TrackerFailureWarning

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")



class Memory(GeneralTracker):
    name = "memory"
    requires_logging_directory = False

    def __init__(self, run_name="run", **kwargs):
        super().__init__()
        self.run_name, self.kwargs, self.rows, self.config = run_name, kwargs, [], None
        self.finished = 0

    @property
    def tracker(self):
        return self.rows

    def store_init_configuration(self, values):
        self.config = values

    def log(self, values, step=None, **kwargs):
        self.rows.append((step, dict(values), kwargs))

    def finish(self):
        self.finished += 1


class Broken(Memory):
    name = "broken"

    def log(self, values, step=None, **kwargs):
        raise TimeoutError("no route to host")


def test_accelerator_logs_to_tensorboard_and_mlflow(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from accel_tracking.testing import read_mlflow_runs, read_tensorboard_scalars

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    accelerator = Accelerator(log_with=["tensorboard", "mlflow"], project_dir=tmp_path / "proj")
    assert accelerator.log_with == ["tensorboard", "mlflow"] and accelerator.trackers == []
    accelerator.init_trackers("exp", config={"lr": 0.5},
                              init_kwargs={"mlflow": {"tracking_uri": uri}})
    assert [t.name for t in accelerator.trackers] == ["tensorboard", "mlflow"]
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    writer = accelerator.get_tracker("tensorboard", unwrap=True)
    assert type(writer).__name__ == "SummaryWriter"
    with pytest.raises(ValueError, match="one run per job"):
        accelerator.init_trackers("again")
    accelerator.end_training()
    scalars = read_tensorboard_scalars(tmp_path / "proj" / "exp")
    assert scalars["loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    (found,) = read_mlflow_runs(uri, "exp")
    assert found["metrics"]["loss"][1] == (1, 0.5) and found["params"] == {"lr": "0.5"}


def test_script_class_registered_by_name_and_log_kwargs(tmp_path):
    from accel.tracking import TRACKERS, register_tracker_class

    register_tracker_class(Memory)
    try:
        accelerator = Accelerator(log_with="memory")
        accelerator.init_trackers("proj", config={"a": 1}, init_kwargs={"memory": {"k": 2}})
        accelerator.log({"x": 1}, step=7, log_kwargs={"memory": {"commit": True}})
        tracker = accelerator.get_tracker("memory")
        assert tracker.run_name == "proj" and tracker.kwargs == {"k": 2}
        assert tracker.config == {"a": 1} and tracker.rows == [(7, {"x": 1}, {"commit": True})]
        accelerator.end_training()
        accelerator.end_training()  # finishing twice is harmless
        assert tracker.finished == 1
    finally:
        TRACKERS._clear()


def test_a_failing_tracker_does_not_stop_training_and_strict_mode_raises():
    good, broken = Memory(), Broken()
    accelerator = Accelerator(log_with=[broken, good])
    accelerator.init_trackers("proj")
    with pytest.warns(TrackerFailureWarning, match="'broken' failed in log.*Training continues"):
        for step in range(4):
            accelerator.log({"loss": float(step)}, step=step)
    assert len(good.rows) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accelerator.end_training()

    strict = Accelerator(log_with=[Broken()])
    strict.init_trackers("proj", strict=True)
    with pytest.raises(TimeoutError, match="no route"):
        strict.log({"loss": 1.0})


def test_unknown_tracker_and_missing_logging_dir_fail_at_construction():
    with pytest.raises(ValueError, match="Did you mean 'wandb'"):
        Accelerator(log_with="wandbb")
    pytest.importorskip("tensorboard")
    with pytest.raises(ValueError, match="project_dir"):
        Accelerator(log_with="tensorboard")


def test_no_trackers_means_blank_tracker_and_no_sdk_import():
    accelerator = Accelerator()
    assert accelerator.log_with == [] and accelerator.trackers == []
    blank = accelerator.get_tracker("wandb")
    assert type(blank) is GeneralTracker and blank.tracker is None
    accelerator.log({"loss": 1.0})  # nothing to log to: a no-op
    accelerator.end_training()


@pytest.mark.multiprocess
@pytest.mark.shared_launch("tracking_run.py", "{out}",
                           env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
def test_two_processes_make_one_run_per_tracker(explain, shared_launch):
    for module in ("tensorboard", "wandb", "mlflow"):
        pytest.importorskip(module)
    from accel_tracking.testing import (
        read_mlflow_runs,
        read_tensorboard_scalars,
        read_wandb_offline_runs,
    )

    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc, tail=6000)
    out = proc.stdout
    assert "TRACKING-OK rank=0" in out and "TRACKING-OK rank=1" in out, explain(proc, tail=6000)
    # the progress bar shows on the main process only
    assert "BAR rank=0 disabled=False" in out and "BAR rank=1 disabled=True" in out
    assert proc.stderr.count("tracked-training: 100%") == 1, explain(proc, tail=6000)
    assert "RAW rank=0 wandb=run" in out and "RAW rank=1 wandb=None" in out
    # the broken tracker warned once (on the main process) and training went on
    assert proc.stderr.count("Tracker 'down' failed in log()") == 1, explain(proc, tail=6000)

    run_dir = tmp_path / "demo"
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    scalars = read_tensorboard_scalars(run_dir)
    assert [s for s, _ in scalars["step_x10"]] == [0, 1, 2, 3]
    assert [v for _, v in scalars["step_x10"]] == [0, 10, 20, 30]

    (wandb_run,) = read_wandb_offline_runs(tmp_path / "wandb")
    logged = [row for row in wandb_run["history"] if "loss" in row]
    assert [row["step_x10"] for row in logged] == [0, 10, 20, 30]
    assert wandb_run["config"] == {"lr": 0.1, "batch_size": 4}

    (mlflow_run,) = read_mlflow_runs(f"sqlite:///{tmp_path}/mlflow.db", "demo")
    assert [s for s, _ in mlflow_run["metrics"]["loss"]] == [0, 1, 2, 3]
    losses = [v for _, v in mlflow_run["metrics"]["loss"]]
    assert losses == pytest.approx([v for _, v in scalars["loss"]])
    assert losses[-1] < losses[0]

    for rank in (0, 1):  # a main_process_only=False tracker logs on every process
        rows = json.loads((tmp_path / f"per_rank_{rank}.json").read_text())
        assert [row["step"] for row in rows] == [0, 1, 2, 3]


def test_accelerate_module_paths_reexport_the_very_objects():
    import accel.tracking
    import accel.utils
    import accel_tracking

    for name in ("GeneralTracker", "WandBTracker", "TensorBoardTracker", "MLflowTracker",
                 "filter_trackers", "get_available_trackers", "on_main_process"):
        assert getattr(accel.tracking, name) is getattr(accel_tracking, name)
    assert accel.tracking.LOGGER_TYPE_TO_CLASS["wandb"] is accel_tracking.WandBTracker
    assert accel.utils.tqdm is accel_tracking.tqdm
    assert accel.utils.LoggerType.WANDB == "wandb"
    assert callable(accel.utils.is_dvclive_available)

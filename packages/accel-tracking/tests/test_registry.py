"""Trackers by name: built-ins come from entry points, unknown names get a suggestion."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import accel_tracking
import pytest
from accel_state.errors import ConfigurationError, MissingDependencyError
from accel_tracking import (
    TRACKERS,
    GeneralTracker,
    LoggerType,
    filter_trackers,
    get_available_trackers,
    register_tracker_class,
)
from accel_tracking.registry import tracker_class

BUILT_INS = {"aim", "clearml", "comet_ml", "dvclive", "mlflow", "swanlab", "tensorboard",
             "trackio", "wandb"}


class ScriptTracker(GeneralTracker):
    name = "script_tracker"
    requires_logging_directory = False


@pytest.fixture
def registry():
    """Leave TRACKERS as the entry points define it after each test."""
    yield TRACKERS
    TRACKERS._clear()


def test_built_ins_register_through_the_entry_point_group():
    declared = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="accel.trackers")
                if ep.dist is not None and ep.dist.name == "accel-tracking"}
    assert set(declared) == BUILT_INS
    for name in BUILT_INS:
        cls = tracker_class(name)
        assert cls.name == name and issubclass(cls, GeneralTracker)
    assert {str(member) for member in LoggerType} == BUILT_INS | {"all"}


def test_unknown_name_lists_the_available_and_suggests_the_closest():
    with pytest.raises(ConfigurationError) as error:
        filter_trackers("tensorbord", logging_dir="/tmp")
    message = str(error.value)
    assert "Did you mean 'tensorboard'?" in message
    assert "wandb" in message and "mlflow" in message and "accel.trackers" in message


def test_names_are_case_and_dash_insensitive():
    assert tracker_class("Comet-ML").name == "comet_ml"
    assert tracker_class(LoggerType.MLFLOW).name == "mlflow"
    installed = [n for n in ("wandb", "mlflow") if tracker_class(n).is_available()]
    assert filter_trackers([n.upper() for n in installed]) == installed


def test_missing_sdk_names_the_install_line():
    if accel_tracking.CometMLTracker.is_available():
        pytest.skip("comet_ml is installed here")
    with pytest.raises(MissingDependencyError, match=r'pip install "accel-tracking\[comet-ml\]"'):
        filter_trackers("comet_ml")
    tracker = accel_tracking.CometMLTracker("project")  # building never imports the SDK
    with pytest.raises(MissingDependencyError, match=r"accel-tracking\[comet-ml\]"):
        tracker.start()


def test_tracker_without_an_extra_names_the_plain_package():
    if accel_tracking.AimTracker.is_available():
        pytest.skip("aim is installed here")
    with pytest.raises(MissingDependencyError, match="pip install aim"):
        accel_tracking.AimTracker("project", "/tmp").start()


def test_logging_directory_is_required_where_the_tracker_writes_files():
    pytest.importorskip("tensorboard")
    with pytest.raises(ConfigurationError, match="project_dir"):
        filter_trackers("tensorboard")
    assert filter_trackers("tensorboard", logging_dir="/tmp/x") == ["tensorboard"]


def test_all_means_every_installed_tracker(registry):
    installed = get_available_trackers()
    for name in installed:
        assert TRACKERS.get(name).is_available()
    assert set(installed) <= BUILT_INS | set(TRACKERS.names())
    assert filter_trackers("all", logging_dir="/tmp/x") == installed
    needs_dir = [n for n in installed if TRACKERS.get(n).requires_logging_directory]
    if needs_dir:
        with pytest.warns(UserWarning, match="needs a logging directory"):
            chosen = filter_trackers("all")
        assert not set(needs_dir) & set(chosen)


def test_register_tracker_class_makes_a_script_class_usable_by_name(registry):
    register_tracker_class(ScriptTracker)
    assert filter_trackers(["script_tracker"]) == ["script_tracker"]
    assert "script_tracker" in get_available_trackers()
    other = type("Other", (ScriptTracker,), {})
    with pytest.warns(UserWarning, match="'script_tracker' is already registered and will be "
                      "overwritten by"):  # Accelerate warns and replaces
        register_tracker_class(other, name="script_tracker")
    assert tracker_class("script_tracker") is other
    with pytest.raises(ConfigurationError, match="GeneralTracker subclass"):
        register_tracker_class(object)  # type: ignore[arg-type]


def test_instances_pass_through_and_classes_need_a_name():
    tracker = ScriptTracker()
    assert filter_trackers([tracker]) == [tracker]

    class Nameless(GeneralTracker):
        pass

    with pytest.raises(NotImplementedError, match="name"):
        Nameless()
    blank = GeneralTracker(_blank=True)
    assert blank.tracker is None and blank.log({"x": 1}) is None


def test_import_is_cheap_and_loads_no_sdk():
    code = ("import sys, accel_tracking, accel_tracking.testing; "
            "print(sorted(m for m in ('wandb', 'mlflow', 'tensorboard', 'tensorboardX', 'dvclive',"
            " 'dvc', 'comet_ml', 'aim', 'clearml', 'swanlab', 'trackio') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

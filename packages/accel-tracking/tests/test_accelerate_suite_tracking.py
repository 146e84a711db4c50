"""Tracker behaviour Accelerate's own test suite checks (issue 15): ClearML's title/series
naming, a table with nothing to show, registering a name twice."""

from __future__ import annotations

import warnings

import pytest
from accel_state.errors import ConfigurationError
from accel_tracking import TRACKERS, GeneralTracker, register_tracker_class
from accel_tracking.registry import tracker_class
from accel_tracking.trackers.services import ClearMLTracker, clearml_title_series


@pytest.mark.parametrize(("name", "expected"), [
    ("eval_loss", ("loss", "eval")), ("test_acc", ("acc", "test")),
    ("train_loss", ("loss", "train")),
    ("should_be_under_train", ("should_be_under_train", "train")),
    ("loss/val", ("loss", "val")), ("loss/", ("loss", "loss")),
    ("evaluation", ("evaluation", "train")),
])
def test_clearml_title_series(name, expected):
    assert clearml_title_series(name) == expected


def test_clearml_table_without_data_names_the_arguments():
    with pytest.raises(ConfigurationError, match="dataframe= or data="):
        ClearMLTracker().log_table("empty")


def test_registering_the_same_class_twice_warns_as_accelerate_and_keeps_it():
    class Twice(GeneralTracker):
        name = "accel_suite_twice"
        requires_logging_directory = False

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            register_tracker_class(Twice)
        with pytest.warns(UserWarning, match="'accel_suite_twice' is already registered"):
            register_tracker_class(Twice)  # a re-run notebook cell, a re-imported module
        assert tracker_class("accel_suite_twice") is Twice
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            register_tracker_class(Twice, override=True)  # accel's way to say "I mean it"
    finally:
        TRACKERS._items.pop("accel_suite_twice", None)  # leave the registry as it was


def test_shadowing_a_built_in_warns_and_replaces_it():
    class Mine(GeneralTracker):
        name = "tensorboard"
        requires_logging_directory = True

    built_in = tracker_class("tensorboard")
    try:
        with pytest.warns(UserWarning, match="especially significant when shadowing a built-in"):
            register_tracker_class(Mine)
        assert tracker_class("tensorboard") is Mine
    finally:
        register_tracker_class(built_in, override=True)


def test_registering_needs_requires_logging_directory_set_by_the_class():
    class NoFlag(GeneralTracker):
        name = "accel_suite_no_flag"

    with pytest.raises(ConfigurationError, match="NoFlag does not set `requires_logging_dir"):
        register_tracker_class(NoFlag)
    assert "accel_suite_no_flag" not in TRACKERS

    class Inherits(ScriptLike):  # set by a parent other than GeneralTracker: enough
        name = "accel_suite_inherits"

    try:
        assert register_tracker_class(Inherits) is Inherits
        assert tracker_class("accel_suite_inherits") is Inherits
    finally:
        TRACKERS._items.pop("accel_suite_inherits", None)


class ScriptLike(GeneralTracker):
    requires_logging_directory = True

"""The failure policy: a broken tracker warns once and training goes on; strict mode raises."""

from __future__ import annotations

import warnings

import pytest
from accel_state.errors import ConfigurationError, MissingDependencyError
from accel_tracking import GeneralTracker, TrackerFailureWarning, TrackerGroup, build_trackers


class Recorder(GeneralTracker):
    """Keeps what it was given in memory (a stand-in for a backend that works)."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self, run_name: str = "run", **kwargs):
        super().__init__()
        self.run_name, self.kwargs = run_name, kwargs
        self.calls: list[tuple] = []

    @property
    def tracker(self):
        return self.calls

    def start(self):
        self.calls.append(("start",))

    def store_init_configuration(self, values):
        self.calls.append(("config", values))

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", dict(values), step, kwargs))

    def finish(self):
        self.calls.append(("finish",))


class Flaky(Recorder):
    """A backend whose network is down: every ``log`` raises."""

    name = "flaky"

    def log(self, values, step=None, **kwargs):
        raise ConnectionError("network is unreachable")


class DeadOnArrival(Recorder):
    """Bad credentials: ``start`` raises, so there is no run."""

    name = "dead"

    def start(self):
        raise PermissionError("invalid API key")


class Everywhere(Recorder):
    name = "everywhere"
    main_process_only = False


def train(group: TrackerGroup, steps: int = 5) -> int:
    group.start({"lr": 0.1})
    done = 0
    for step in range(steps):
        group.log({"loss": 1.0 / (step + 1)}, step=step)
        done += 1
    group.finish()
    return done


def test_a_tracker_whose_log_raises_does_not_stop_training():
    good, flaky = Recorder(), Flaky()
    group = TrackerGroup([flaky, good], strict=False)
    with pytest.warns(TrackerFailureWarning) as caught:
        assert train(group) == 5
    messages = [str(w.message) for w in caught]
    first = [m for m in messages if "failed in log()" in m]
    assert len(first) == 1, messages  # warned once, not once per step
    assert "ConnectionError: network is unreachable" in first[0]
    assert "Training continues" in first[0] and "ACCEL_TRACKING_STRICT=1" in first[0]
    assert any("failed 5 times" in m for m in messages), messages  # summed up at the end
    assert [c[0] for c in good.calls] == ["start", "config"] + ["log"] * 5 + ["finish"]
    assert group.failures() == {"flaky": 5}


def test_a_tracker_that_cannot_start_is_skipped_for_the_rest_of_the_run():
    dead, good = DeadOnArrival(), Recorder()
    group = TrackerGroup([dead, good])
    with pytest.warns(TrackerFailureWarning, match="failed in start.*skipped for the rest"):
        assert train(group) == 5
    assert dead.calls == []  # neither config, log nor finish reached it
    assert len(good.calls) == 8


@pytest.mark.parametrize("how", ["flag", "env"])
def test_strict_mode_makes_a_failure_an_error(how, monkeypatch):
    if how == "env":
        monkeypatch.setenv("ACCEL_TRACKING_STRICT", "1")
        group = TrackerGroup([Flaky()])
    else:
        group = TrackerGroup([Flaky()], strict=True)
    assert group.strict
    group.start()
    with pytest.raises(ConnectionError, match="unreachable") as error:
        group.log({"loss": 1.0}, step=0)
    notes = getattr(error.value, "__notes__", [])
    assert not notes or "strict tracking" in notes[0]


def test_errors_accel_raises_on_purpose_always_propagate():
    class NeedsSdk(Recorder):
        name = "needs_sdk"
        package = "surely_not_installed_sdk"

        def start(self):
            self.require_sdk()

    with pytest.raises(MissingDependencyError, match="surely_not_installed_sdk"):
        TrackerGroup([NeedsSdk()], strict=False).start()


def test_only_the_main_process_calls_main_process_trackers():
    main_only, everywhere = Recorder(), Everywhere()
    group = TrackerGroup([main_only, everywhere], is_main_process=lambda: False)
    train(group, steps=2)
    assert main_only.calls == []
    assert [c[0] for c in everywhere.calls] == ["start", "config", "log", "log", "finish"]


def test_log_kwargs_go_to_the_named_tracker_only():
    a, b = Recorder(), Everywhere()
    group = TrackerGroup([a, b])
    group.start()
    group.log({"x": 1}, step=3, log_kwargs={"everywhere": {"commit": False}})
    assert a.calls[-1] == ("log", {"x": 1}, 3, {})
    assert b.calls[-1] == ("log", {"x": 1}, 3, {"commit": False})


def test_get_and_unwrap_and_blank():
    tracker = Recorder()
    group = TrackerGroup([tracker])
    assert group.get("Recorder") is tracker
    assert group.get("recorder", unwrap=True) is tracker.calls
    with pytest.raises(ConfigurationError, match="not one of the trackers"):
        group.get("wandb")
    blank = TrackerGroup([]).get("wandb")
    assert type(blank) is GeneralTracker and blank.tracker is None


def test_finish_is_once_and_logging_afterwards_is_ignored_with_a_warning():
    tracker = Recorder()
    group = TrackerGroup([tracker])
    group.start()
    group.finish()
    group.finish()
    with pytest.warns(TrackerFailureWarning, match="after end_training"):
        group.log({"x": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group.log({"x": 2})  # said once
    assert [c[0] for c in tracker.calls] == ["start", "finish"]


def test_build_trackers_passes_init_kwargs_and_the_logging_dir(tmp_path):
    class Dir(Recorder):
        name = "dir"
        requires_logging_directory = True

        def __init__(self, run_name, logging_dir, **kwargs):
            super().__init__(run_name, **kwargs)
            self.logging_dir = logging_dir

    from accel_tracking import register_tracker_class
    from accel_tracking.registry import TRACKERS

    register_tracker_class(Dir)
    register_tracker_class(Recorder)
    try:
        recorder_instance = Everywhere()
        with pytest.warns(UserWarning, match="unused"):
            built = build_trackers(["dir", "recorder", recorder_instance], "proj", tmp_path,
                                   {"recorder": {"entity": "me"}, "typo": {}})
        assert built[0].logging_dir == tmp_path and built[0].run_name == "proj"
        assert built[1].kwargs == {"entity": "me"} and built[2] is recorder_instance
        with pytest.raises(ConfigurationError, match="logging directory"):
            build_trackers(["dir"], "proj", None)
    finally:
        TRACKERS._clear()


def test_call_reaches_only_trackers_with_the_hook():
    class WithImages(Recorder):
        name = "images"

        def log_images(self, values, step=None):
            self.calls.append(("images", sorted(values), step))

    plain, images = Recorder(), WithImages()
    group = TrackerGroup([plain, images])
    group.start()
    group.call("log_images", {"a": 1}, step=2)
    group.call("log_images", {"b": 1}, only="recorder")  # recorder has no log_images
    assert images.calls[-1] == ("images", ["a"], 2) and len(images.calls) == 2
    assert plain.calls == [("start",)]

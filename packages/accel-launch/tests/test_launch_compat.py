"""_filter_args, setup_fp8_env, PrepareForLaunch and test_launch (Accelerate's launch helpers)."""

from __future__ import annotations

import argparse
import os

import pytest
from accel_launch import launch_compat
from accel_launch.launch_compat import PrepareForLaunch, _filter_args, setup_fp8_env
from accel_state import ConfigurationError, DistributedType


def test_filter_args_keeps_only_what_the_parser_knows():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=3)
    args = argparse.Namespace(lr=0.5, num_processes=2, mixed_precision="bf16")
    filtered = _filter_args(args, parser)
    assert vars(filtered) == {"lr": 0.5, "epochs": 3}
    defaults = _filter_args(argparse.Namespace(), parser, ["--epochs", "7"])
    assert vars(defaults) == {"lr": 0.1, "epochs": 7}


def test_setup_fp8_env_writes_the_declared_variables():
    args = argparse.Namespace(fp8_backend="te", fp8_margin=2, fp8_format="HYBRID",
                              fp8_override_linear_precision=(True, False, False),
                              fp8_interval=None, mixed_precision="fp8")
    current = setup_fp8_env(args, {"KEEP": "1"})
    assert current == {"KEEP": "1", "ACCEL_FP8_BACKEND": "te", "ACCEL_FP8_MARGIN": "2",
                       "ACCEL_FP8_FORMAT": "HYBRID", "ACCEL_FP8_OVERRIDE_FPROP": "True",
                       "ACCEL_FP8_OVERRIDE_DGRAD": "False", "ACCEL_FP8_OVERRIDE_WGRAD": "False"}


def test_setup_fp8_env_rejects_bad_arguments():
    with pytest.raises(ConfigurationError, match="fp8_override_linear_precision"):
        setup_fp8_env(argparse.Namespace(fp8_override_linear_precision=(True,)), {})
    with pytest.raises(ConfigurationError, match="fp8_colour='red'"):
        setup_fp8_env(argparse.Namespace(fp8_colour="red"), {})


def _unset(monkeypatch, *names: str) -> None:
    """Remove ``names`` now and again after the test (PrepareForLaunch writes them into
    os.environ; a plain delenv of an absent variable would not undo that)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_prepare_for_launch_sets_ranks_and_calls_the_function(monkeypatch):
    _unset(monkeypatch, "LOCAL_RANK", "RANK", "FORK_LAUNCHED")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    seen = {}

    def train(a, b):
        seen.update(a=a, b=b, local=os.environ["LOCAL_RANK"], rank=os.environ["RANK"],
                    fork=os.environ["FORK_LAUNCHED"])
        return "done"

    assert PrepareForLaunch(train, distributed_type="MULTI_CPU")(1, "x", 2) == "done"
    assert seen == {"a": "x", "b": 2, "local": "1", "rank": "3", "fork": "1"}
    member = PrepareForLaunch(train, distributed_type=DistributedType.MULTI_CPU)  # the enum too
    assert member.distributed_type is DistributedType.MULTI_CPU


def test_prepare_for_launch_without_distribution_sets_no_ranks(monkeypatch):
    _unset(monkeypatch, "RANK", "FORK_LAUNCHED")
    PrepareForLaunch(lambda: None)(0)
    assert "RANK" not in os.environ


def test_prepare_for_launch_rejects_bad_arguments(monkeypatch):
    with pytest.raises(ConfigurationError, match="distributed_type='MULTI_TOASTER'"):
        PrepareForLaunch(print, distributed_type="MULTI_TOASTER")
    with pytest.raises(ConfigurationError, match="must be callable"):
        PrepareForLaunch("train.py")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigurationError, match="WORLD_SIZE"):
        PrepareForLaunch(print, debug=True)(0)


def test_test_launch_builds_the_process_state():
    from accel_state import PartialState

    launch_compat.test_launch()
    assert PartialState().initialized

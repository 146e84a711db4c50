"""Behaviour Accelerate's own test suite checks in accel-state (issue 15): probe signatures,
the reset-state hint, ``ACCELERATE_TORCH_DEVICE``, env files and the environment purge."""

from __future__ import annotations

import logging
import os
import unittest

import pytest
import torch
from accel_state import PartialState
from accel_state.device_info import check_os_kernel
from accel_state.env import convert_dict_to_env_variables, purge_accelerate_environment
from accel_state.imports import (
    is_mps_available,
    is_npu_available,
    is_numpy_available,
    is_xpu_available,
)


def test_device_probes_take_accelerates_arguments():
    # Accelerate's own test helpers call is_mps_available(min_version="2.0")
    assert is_mps_available(min_version="2.0") is is_mps_available()
    assert is_mps_available(min_version="999.0") is False
    assert is_xpu_available(check_device=True) in (True, False)
    assert is_npu_available(check_device=True) is False  # torch_npu is not installed here
    # accel-state alone does not install numpy: the answer follows whether it is there
    assert is_numpy_available(min_version="1.0") is is_numpy_available()
    assert is_numpy_available(min_version="999.0") is False


def test_reset_state_names_the_cause():
    state = PartialState()
    with pytest.raises(AttributeError, match="'PartialState' object has no attribute 'nothing'"):
        state.nothing  # noqa: B018 - an ordinary miss stays an ordinary message
    PartialState._reset_state()
    with pytest.raises(AttributeError, match=r"`PartialState._reset_state\(\)` was called"):
        state.num_processes  # noqa: B018
    state.extra = 1  # the shared state stays writable
    assert state.extra == 1


def test_accelerate_torch_device_keeps_the_index(monkeypatch):
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu:3")
    assert PartialState().device == torch.device("cpu", 3)


def test_accelerate_torch_device_of_another_type_yields_to_cpu_true(monkeypatch):
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cuda:1")
    assert PartialState(cpu=True).device == torch.device("cpu")


def test_env_file_lines_skip_unsafe_values_with_a_warning(caplog):
    env = {"ACCELERATE_DEBUG_MODE": "1", "BAD": "<mything", "EMPTY": "", "OTHER": 2}
    with caplog.at_level(logging.WARNING, logger="accel.utils.environment"):
        lines = convert_dict_to_env_variables(env)
    assert lines == ["ACCELERATE_DEBUG_MODE=1\n", "OTHER=2\n"]
    skipped = [r.getMessage() for r in caplog.records if r.name == "accel.utils.environment"]
    assert len(skipped) == 2 and "BAD=<mything" in skipped[0]


def test_old_kernel_warning_names_both_versions(monkeypatch, caplog):
    import platform

    class Uname:
        system, release = "Linux", "5.4.0-35-generic"

    monkeypatch.setattr(platform, "uname", Uname)
    with caplog.at_level(logging.WARNING):
        check_os_kernel()
    (record,) = caplog.records
    assert "5.4.0" in record.msg and "5.5.0" in record.msg  # formatted, not lazy args


def _set_var():
    os.environ["ACCELERATE_SOME_ENV_VAR"] = "true"


@purge_accelerate_environment
class _PurgedBase(unittest.TestCase):
    __test__ = False  # a subject of the tests below, not a test case of its own

    def test_inherited(self):
        _set_var()


class _PurgedChild(_PurgedBase):
    def test_own(self):
        _set_var()


@purge_accelerate_environment
class _PurgedPytestStyle:
    def test_method(self):
        _set_var()


@pytest.mark.parametrize(("cls", "method"), [(_PurgedChild, "test_own"),
                                             (_PurgedChild, "test_inherited"),
                                             (_PurgedPytestStyle, "test_method")])
def test_purge_covers_subclasses_and_plain_classes(cls, method):
    os.environ.pop("ACCELERATE_SOME_ENV_VAR", None)
    instance = cls(method) if issubclass(cls, unittest.TestCase) else cls()
    getattr(instance, method)()
    assert "ACCELERATE_SOME_ENV_VAR" not in os.environ


def test_purge_restores_values_set_before():
    os.environ["ACCELERATE_SOME_ENV_VAR"] = "1"
    try:
        purge_accelerate_environment(lambda: os.environ.update(ACCELERATE_SOME_ENV_VAR="2"))()
        assert os.environ["ACCELERATE_SOME_ENV_VAR"] == "1"
    finally:
        del os.environ["ACCELERATE_SOME_ENV_VAR"]

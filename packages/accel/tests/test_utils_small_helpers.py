"""Two of Accelerate's small helpers under its module paths: ``env_var_path_add``
(accel.utils.launch) and ``TORCH_SAFE_GLOBALS`` (accel.utils.other)."""

from __future__ import annotations

import io

import pytest
import torch

from accel.utils.launch import env_var_path_add


def test_env_var_path_add_appends_and_sets_nothing(monkeypatch):
    monkeypatch.setenv("ACCEL_TEST_PATHS", "/a::/b")
    assert env_var_path_add("ACCEL_TEST_PATHS", "/c") == "/a:/b:/c"  # empty entries dropped
    assert env_var_path_add("ACCEL_TEST_PATHS", "/c") == "/a:/b:/c"  # the variable is unchanged
    monkeypatch.delenv("ACCEL_TEST_PATHS")
    assert env_var_path_add("ACCEL_TEST_PATHS", 7) == "7"


def test_torch_safe_globals_let_torch_load_a_numpy_rng_state_weights_only():
    np = pytest.importorskip("numpy")
    from accel.utils.other import TORCH_SAFE_GLOBALS

    state = np.random.RandomState(3).get_state()
    buffer = io.BytesIO()
    torch.save({"numpy": state}, buffer)
    buffer.seek(0)
    with pytest.raises(Exception, match="add_safe_globals"):
        torch.load(buffer, weights_only=True)  # refused without the list
    buffer.seek(0)
    with torch.serialization.safe_globals(TORCH_SAFE_GLOBALS):
        loaded = torch.load(buffer, weights_only=True)["numpy"]
    assert loaded[0] == state[0] and np.array_equal(loaded[1], state[1])

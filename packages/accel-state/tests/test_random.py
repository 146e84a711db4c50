"""Seeding, RNG synchronisation (one process) and exact capture/restore of RNG states."""

from __future__ import annotations

import json
import pickle
import random

import pytest
import torch
from accel_state import env
from accel_state.errors import ConfigurationError
from accel_state.random import (
    RNGType,
    capture_rng_state,
    restore_rng_state,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
)

try:  # numpy is optional for accel-state: its own test environment does not have it
    import numpy as np
except ImportError:
    np = None


def _numpy_draw(kind: str = "rand") -> float | None:
    return None if np is None else float(getattr(np.random, kind)())


def _draws() -> tuple:
    return random.random(), _numpy_draw(), torch.rand(3).tolist()


@pytest.fixture
def restore_determinism(monkeypatch):
    monkeypatch.delenv(env.CUBLAS_WORKSPACE_CONFIG.name, raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


def test_rng_type_values_match_accelerate():
    assert RNGType.list() == ["torch", "cuda", "mlu", "sdaa", "musa", "npu", "xla", "xpu", "hpu",
                              "neuron", "generator"]
    assert RNGType("cuda") is RNGType.CUDA and str(RNGType.TORCH) == "torch"
    assert RNGType.GENERATOR == "generator" and "xpu" in RNGType and "gpu" not in RNGType


def test_set_seed_makes_python_numpy_and_torch_repeat():
    set_seed(42)
    first = _draws()
    set_seed(42)
    assert _draws() == first
    set_seed(43)
    assert _draws() != first


def test_set_seed_device_specific_adds_the_rank(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    set_seed(10, device_specific=True)
    shifted = _draws()
    set_seed(13)
    assert _draws() == shifted


def test_set_seed_device_specific_reads_the_process_group(gloo_group, monkeypatch):
    monkeypatch.setenv("RANK", "5")  # the group (rank 0) wins over the environment
    set_seed(10, device_specific=True)
    draws = _draws()
    set_seed(10)
    assert _draws() == draws


def test_set_seed_deterministic(restore_determinism):
    set_seed(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert env.CUBLAS_WORKSPACE_CONFIG.get() == ":4096:8"


def test_set_seed_deterministic_keeps_a_user_cublas_setting(restore_determinism, monkeypatch):
    monkeypatch.setenv(env.CUBLAS_WORKSPACE_CONFIG.name, ":16:8")
    set_seed(0, deterministic=True)
    assert env.CUBLAS_WORKSPACE_CONFIG.get() == ":16:8"


def test_synchronize_without_group_leaves_states_alone():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    synchronize_rng_states(["torch", RNGType.TORCH])
    synchronize_rng_state()  # None and no generator: torch
    assert torch.equal(torch.rand(2), expected)
    generator = torch.Generator().manual_seed(9)
    reference = torch.Generator().manual_seed(9)
    synchronize_rng_state(generator=generator)  # None and a generator: the generator
    assert torch.equal(torch.rand(2, generator=generator), torch.rand(2, generator=reference))


def test_synchronize_with_one_process_group(gloo_group):
    torch.manual_seed(11)
    generator = torch.Generator().manual_seed(12)
    expected = (torch.rand(2), torch.rand(2, generator=torch.Generator().manual_seed(12)))
    torch.manual_seed(11)
    synchronize_rng_states(["torch", "generator"], generator=generator)
    assert torch.equal(torch.rand(2), expected[0])
    assert torch.equal(torch.rand(2, generator=generator), expected[1])


def test_synchronize_errors_name_the_problem():
    with pytest.raises(ConfigurationError, match="'dice'.*torch"):
        synchronize_rng_states(["dice"])
    with pytest.raises(ConfigurationError, match="generator="):
        synchronize_rng_state("generator")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigurationError, match="no CUDA device"):
            synchronize_rng_state(RNGType.CUDA)


def test_capture_then_restore_repeats_every_draw():
    set_seed(123)
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    _numpy_draw("standard_normal")
    state = capture_rng_state()
    first = (_draws(), random.gauss(0, 1), _numpy_draw("standard_normal"),
             torch.randn(4).tolist())
    restore_rng_state(state)
    second = (_draws(), random.gauss(0, 1), _numpy_draw("standard_normal"),
              torch.randn(4).tolist())
    assert first == second


def test_captured_state_is_tensors_and_plain_data():
    state = capture_rng_state()
    assert isinstance(state["torch"], torch.Tensor) and state["torch"].dtype == torch.uint8
    assert state["python"]["state"].dtype == torch.int64 and state["python"]["state"].numel() == 625
    if np is not None:
        assert state["numpy"]["key"].dtype == torch.int64
        assert state["numpy"]["bit_generator"] == "MT19937"
        plain = {k: v for k, v in state["numpy"].items() if k != "key"}
        json.dumps(plain)  # the scalars go to JSON, the tensors to safetensors
    else:
        assert "numpy" not in state
    json.dumps({k: v for k, v in state["python"].items() if k != "state"})
    expected = (random.random(), torch.rand(1).item())
    restore_rng_state(pickle.loads(pickle.dumps(state)))
    assert (random.random(), torch.rand(1).item()) == expected


def test_restore_accepts_plain_lists_and_skips_missing_parts():
    set_seed(1)
    state = capture_rng_state()
    as_lists = {"python": {**state["python"], "state": state["python"]["state"].tolist()},
                "torch": state["torch"].tolist()}
    expected = (random.random(), torch.rand(1).item())
    restore_rng_state(as_lists)
    assert (random.random(), torch.rand(1).item()) == expected
    restore_rng_state({})  # nothing to restore is fine


def test_restore_warns_about_an_absent_accelerator():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.warns(UserWarning, match="'cuda'"):
        restore_rng_state({"cuda": [torch.zeros(16, dtype=torch.uint8)]})

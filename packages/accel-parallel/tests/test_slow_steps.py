"""One-time compiles announce themselves (what, where it is cached, elapsed time) on the
main process only, and stay silent when they are quick; DeepSpeed's ops that will be
compiled are predicted from the config and the extensions cache."""

from __future__ import annotations

import io
import time

import pytest
import torch
from accel_parallel.slow_steps import Announcer, announce_first_forward, uncompiled_extensions


def test_a_slow_block_is_announced_with_its_elapsed_time():
    out = io.StringIO()
    with Announcer("compiling X once", what="X", delay=0.0, every=0.05, stream=out):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "accel: compiling X once"
    assert any("X: still running" in line and "s so far" in line for line in lines), lines
    assert lines[-1].startswith("accel: X: done after"), lines


def test_quick_blocks_and_other_processes_stay_silent_and_failures_say_so():
    out = io.StringIO()
    with Announcer("never shown", what="X", delay=5.0, stream=out):
        pass
    with Announcer("never shown", what="X", delay=0.0, main=False, stream=out):
        time.sleep(0.05)
    assert out.getvalue() == ""
    with pytest.raises(RuntimeError), Announcer("compiling", what="X", stream=out):
        time.sleep(0.05)
        raise RuntimeError("g++ failed")
    assert out.getvalue().splitlines()[-1].startswith("accel: X: failed after")


def test_first_forward_hooks_remove_themselves():
    model = torch.nn.Linear(2, 2)
    announce_first_forward(model, main=True, delay=5.0)
    assert model._forward_pre_hooks and model._forward_hooks
    model(torch.randn(1, 2))
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_uncompiled_extensions_reads_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert uncompiled_extensions(["cpu_adam", "deepspeed_shm_comm"]) == ["deepspeed_shm_comm"]


def test_deepspeed_predicts_the_ops_it_compiles(tmp_path, monkeypatch, state):
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed.runtime import _ops_to_build, announce_setup

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    offload = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    adamw = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
    sgd = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    cpu = torch.device("cpu")
    monkeypatch.setenv("ACCEL_DEEPSPEED_SHM_COMM", "0")
    assert _ops_to_build(offload, adamw, cpu) == ["cpu_adam"]
    assert _ops_to_build(offload | {"zero_force_ds_cpu_optimizer": False}, adamw, cpu) == []
    assert _ops_to_build(offload, sgd, cpu) == []
    assert _ops_to_build(offload | {"optimizer": {"type": "Adam"}}, None, cpu) == ["cpu_adam"]
    assert _ops_to_build({"zero_optimization": {"stage": 2}}, adamw, cpu) == []
    announcer = announce_setup(offload, adamw, state)
    assert announcer.delay == 0.0 and "cpu_adam" in announcer.message
    assert "2-6 minutes" in announcer.message and str(tmp_path) in announcer.message
    (tmp_path / "cpu_adam").mkdir(exist_ok=True)
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert announce_setup(offload, adamw, state).delay == 20.0  # cached: only if slow

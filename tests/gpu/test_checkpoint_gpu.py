"""Checkpoints of a model on one CUDA device: exact resume with CUDA RNG, async saves whose
parameter copy runs on a side stream after save_state returned, background verification,
save_model. Needs CUDA."""

from __future__ import annotations

import time

import pytest
import torch
from accel_checkpoint import CorruptCheckpointError
from safetensors.torch import load_file
from torch import nn

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _setup(seed: int = 0):
    from accel import Accelerator

    torch.manual_seed(seed)
    accelerator = Accelerator()
    model = nn.Sequential(nn.Linear(256, 256), nn.Dropout(0.2), nn.Linear(256, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _train(accelerator, model, optimizer, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(32, 256, device=accelerator.device)  # the CUDA RNG is state too
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()


def _snapshot(model, optimizer):
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state = {(i, k): v.clone() for i, s in optimizer.state_dict()["state"].items()
             for k, v in s.items()}
    return params, state


def test_cuda_exact_resume_with_dropout_and_cuda_rng(tmp_path):
    accelerator, model, optimizer = _setup()
    _train(accelerator, model, optimizer, 3)
    accelerator.save_state(tmp_path / "ckpt")
    _train(accelerator, model, optimizer, 3)
    expected = _snapshot(model, optimizer)

    accelerator, model, optimizer = _setup(seed=123)  # different init and RNG
    accelerator.load_state(tmp_path / "ckpt")
    assert next(model.parameters()).device.type == "cuda"
    _train(accelerator, model, optimizer, 3)
    got = _snapshot(model, optimizer)
    for key, value in expected[0].items():
        assert torch.equal(got[0][key], value), key
    for key, value in expected[1].items():
        assert torch.equal(got[1][key].to(value.device), value), key


def test_cuda_async_save_copies_on_a_side_stream_before_the_next_step(tmp_path, monkeypatch):
    import accel_checkpoint.manager as manager
    import accel_checkpoint.saving as saving

    accelerator, model, optimizer = _setup()
    _train(accelerator, model, optimizer, 2)
    before = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    real_stage = saving.stage
    deferred = []

    def slow_stage(parts):  # without the gate, the next step would change the weights first
        deferred.append(sum(1 for p in parts for t in p.deferred.values()
                            if t.device.type == "cuda"))
        time.sleep(0.3)
        real_stage(parts)

    monkeypatch.setattr(manager, "stage", slow_stage)
    start = time.perf_counter()
    accelerator.save_state(tmp_path / "async", async_save=True)
    returned = time.perf_counter() - start
    _train(accelerator, model, optimizer, 1)
    accelerator.wait_for_checkpoint()
    assert deferred and deferred[0] >= 4  # weights and Adam moments copied after returning
    assert returned < 0.3
    saved = load_file(tmp_path / "async" / "model.safetensors")
    for key, value in before.items():
        assert torch.equal(saved[key], value), key


def test_cuda_background_verification_gates_the_step(tmp_path):
    accelerator, model, optimizer = _setup()
    _train(accelerator, model, optimizer, 1)
    path = accelerator.save_state(tmp_path / "ckpt")
    accelerator.load_state(path, verify="background")
    _train(accelerator, model, optimizer, 1)  # verification passes
    target = tmp_path / "ckpt" / "optimizer.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    accelerator.load_state(path, verify="background")
    with pytest.raises(CorruptCheckpointError, match="optimizer.safetensors"):
        _train(accelerator, model, optimizer, 1)


def test_cuda_save_model_writes_cpu_safetensors(tmp_path):
    accelerator, model, _ = _setup()
    accelerator.save_model(model, tmp_path / "weights")
    weights = load_file(tmp_path / "weights" / "model.safetensors")
    for key, value in model.state_dict().items():
        assert weights[key].device.type == "cpu" and torch.equal(weights[key], value.cpu()), key

"""Accelerator(dynamo_backend=..., dynamo_plugin=...): prepared models are compiled, train,
unwrap, and checkpoint under the names of the plain model."""

from __future__ import annotations

import pytest
import torch
from accel_state import ConfigurationError
from torch import nn

from accel import Accelerator
from accel.utils import DynamoBackend, TorchDynamoPlugin, is_compiled_module


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    for name in ("ACCEL_DYNAMO_BACKEND", "ACCELERATE_DYNAMO_BACKEND",
                 "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"):
        monkeypatch.delenv(name, raising=False)
    torch._dynamo.reset()


def _train(accelerator, model, steps=3):
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(steps):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return model


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def test_dynamo_backend_compiles_and_trains_like_eager(tmp_path):
    plain = _train(Accelerator(cpu=True), _model())
    accelerator = Accelerator(cpu=True, dynamo_backend="eager", project_dir=str(tmp_path))
    compiled = _train(accelerator, _model())
    assert is_compiled_module(compiled)
    original = accelerator.unwrap_model(compiled, keep_torch_compile=False)
    assert not is_compiled_module(original)
    assert accelerator.unwrap_model(compiled) is compiled
    torch.testing.assert_close(original.state_dict(), plain.state_dict())
    # checkpoints and full state dicts carry the plain model's names (no "_orig_mod.")
    assert list(accelerator.get_state_dict(compiled)) == list(plain.state_dict())
    accelerator.save_state(str(tmp_path / "ckpt"))
    fresh = Accelerator(cpu=True)
    target = fresh.prepare(_model())
    fresh.load_state(str(tmp_path / "ckpt"))
    torch.testing.assert_close(target.state_dict(), plain.state_dict())


def test_environment_and_plugin_spellings(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "eager")
    assert is_compiled_module(Accelerator(cpu=True).prepare(_model()))
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND")
    plugin = TorchDynamoPlugin(backend=DynamoBackend.EAGER, use_regional_compilation=True)
    model = Accelerator(cpu=True, dynamo_plugin=plugin).prepare(_model())
    assert not is_compiled_module(model)  # regional: the blocks are compiled in place
    assert all(layer._compiled_call_impl is not None
               for layer in model if isinstance(layer, nn.Linear))
    assert not is_compiled_module(Accelerator(cpu=True).prepare(_model()))


def test_bad_dynamo_arguments_are_named():
    with pytest.raises(ConfigurationError, match="both dynamo_backend='eager' and dynamo_plugin"):
        Accelerator(cpu=True, dynamo_backend="eager", dynamo_plugin=TorchDynamoPlugin())
    with pytest.raises(ConfigurationError, match="dynamo_plugin=.*must be a TorchDynamoPlugin"):
        Accelerator(cpu=True, dynamo_plugin={"backend": "eager"})
    with pytest.raises(ConfigurationError, match=r"dynamo_backend\)='fast'.*inductor"):
        Accelerator(cpu=True, dynamo_backend="fast")

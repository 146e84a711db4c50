"""Hooks restore modules exactly; model-level offload chains; offload storage round trips."""

from __future__ import annotations

import copy

import torch
from accel_inference import (
    AlignDevicesHook,
    LayerwiseCastingHook,
    ModelHook,
    OffloadedWeightsLoader,
    PrefixedDataset,
    SequentialHook,
    add_hook_to_module,
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    extract_submodules_state_dict,
    load_offloaded_weight,
    offload_state_dict,
    offload_weight,
    remove_hook_from_module,
    remove_hook_from_submodules,
)
from torch import nn

IDS = torch.tensor([[1, 5, 7, 2], [3, 3, 0, 31]])


class Scale(ModelHook):
    def __init__(self, factor):
        self.factor = factor

    def pre_forward(self, module, *args, **kwargs):
        return tuple(a * self.factor for a in args), kwargs

    def post_forward(self, module, output):
        return output + self.factor


def test_add_and_remove_restore_the_module_exactly():
    layer = nn.Linear(3, 3)
    before = dict(vars(layer))
    x = torch.ones(2, 3)
    plain = layer(x)
    add_hook_to_module(layer, Scale(2.0))
    assert isinstance(layer._hf_hook, Scale) and layer._old_forward.__func__ is nn.Linear.forward
    torch.testing.assert_close(layer(x), nn.functional.linear(x * 2, layer.weight, layer.bias) + 2)
    add_hook_to_module(layer, Scale(3.0), append=True)
    assert isinstance(layer._hf_hook, SequentialHook) and len(layer._hf_hook.hooks) == 2
    expected = nn.functional.linear(x * 6, layer.weight, layer.bias) + 5
    torch.testing.assert_close(layer(x), expected)
    add_hook_to_module(layer, Scale(1.0))  # replaces; keeps the true original forward
    assert layer._old_forward.__func__ is nn.Linear.forward
    remove_hook_from_module(layer)
    assert vars(layer).keys() == before.keys() and "forward" not in vars(layer)
    torch.testing.assert_close(layer(x), plain)
    # a forward that was an instance attribute before is put back as one
    custom = nn.Linear(3, 3)
    custom.forward = lambda t: t * 0
    add_hook_to_module(custom, Scale(1.0))
    remove_hook_from_module(custom)
    assert torch.equal(custom(x), torch.zeros(2, 3))


def test_remove_recursively_restores_offloaded_weights(models):
    model = models.trained()
    reference = copy.deepcopy(model)
    cpu_offload(model, execution_device="cpu")
    assert model.blocks[0].a.weight.is_meta
    torch.testing.assert_close(model(IDS), reference(IDS), rtol=0, atol=0)
    remove_hook_from_submodules(model)
    assert not any(hasattr(m, "_hf_hook") or hasattr(m, "_old_forward")
                   for m in model.modules())
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


class RecordingModel(nn.Module):
    """Logs every ``.to(device)`` so the offload order is visible on a CPU-only machine."""

    def __init__(self, name, log):
        super().__init__()
        self.name, self.log = name, log
        self.layer = nn.Linear(2, 2)

    def to(self, *args, **kwargs):
        self.log.append((self.name, str(args[0]) if args else kwargs))
        return super().to(*args, **kwargs)

    def forward(self, x):
        return self.layer(x)


def test_cpu_offload_with_hook_moves_models_in_and_out_in_turn():
    log = []
    encoder, decoder = RecordingModel("encoder", log), RecordingModel("decoder", log)
    encoder, enc_hook = cpu_offload_with_hook(encoder, execution_device="cpu:0")
    decoder, dec_hook = cpu_offload_with_hook(decoder, execution_device="cpu:0",
                                              prev_module_hook=enc_hook)
    assert log == [("encoder", "cpu"), ("decoder", "cpu")]  # both parked at attach
    log.clear()
    encoder(torch.ones(1, 2))
    assert log == [("encoder", "cpu:0")]
    log.clear()
    decoder(torch.ones(1, 2))
    assert log == [("encoder", "cpu"), ("decoder", "cpu:0")]  # previous out, then this in
    log.clear()
    dec_hook.offload()
    assert log == [("decoder", "cpu")]
    dec_hook.remove()
    assert not hasattr(decoder, "_hf_hook")


def test_align_devices_hook_io_same_device_and_layerwise_cast():
    layer = nn.Linear(4, 4)
    add_hook_to_module(layer, AlignDevicesHook(execution_device="cpu", io_same_device=True))
    assert layer(torch.ones(1, 4)).device.type == "cpu"
    remove_hook_from_module(layer)
    x = torch.randn(2, 4)
    expected = layer(x)
    add_hook_to_module(layer, LayerwiseCastingHook(torch.bfloat16, torch.float32))
    assert layer.weight.dtype == torch.bfloat16
    out = layer(x)
    assert out.dtype == torch.float32 and layer.weight.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
    remove_hook_from_module(layer)
    assert layer.weight.dtype == torch.float32


def test_disk_offload_prefetches_the_next_block(models, tmp_path):
    model = models.trained()
    expected = model(IDS)
    disk_offload(model, tmp_path / "off", execution_device="cpu")
    hooks = [m._hf_hook for m in model.modules() if isinstance(getattr(m, "_hf_hook", None),
                                                                AlignDevicesHook)
             and m._hf_hook.offload]
    prefetcher = hooks[0].prefetcher
    assert prefetcher is not None and all(h.prefetcher is prefetcher for h in hooks)
    for _ in range(3):
        torch.testing.assert_close(model(IDS), expected, rtol=0, atol=0)
    assert prefetcher.hits >= 2 * (len(prefetcher.order) - 1)


def test_offload_storage_round_trip(tmp_path):
    index = {}
    for name, tensor in {"w": torch.randn(3, 2), "b": torch.randn(4).bfloat16(),
                         "s": torch.tensor(7), "e": torch.zeros(0, 3)}.items():
        offload_weight(tensor, name, tmp_path, index=index)
        back = load_offloaded_weight(tmp_path / f"{name}.dat", index[name])
        assert back.dtype == tensor.dtype and torch.equal(back, tensor), name
    state = {"a.x": torch.ones(2), "a.y": torch.zeros(2), "ab.z": torch.ones(1)}
    offload_state_dict(tmp_path / "folder", state)
    loader = OffloadedWeightsLoader(state_dict={"ram": torch.ones(1)},
                                    save_folder=tmp_path / "folder")
    assert set(loader) == {"ram", "a.x", "a.y", "ab.z"} and torch.equal(loader["a.y"],
                                                                          torch.zeros(2))
    prefixed = PrefixedDataset(loader, "a.")
    assert sorted(prefixed) == ["x", "y"] and torch.equal(prefixed["x"], torch.ones(2))
    assert set(extract_submodules_state_dict(state, ["a"])) == {"a.x", "a.y"}


def test_prepare_pippy_single_process_runs_the_model_and_checks_split_points():
    import pytest
    from accel_inference import prepare_pippy
    from accel_state.errors import ConfigurationError

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 4)
    expected = model(x)
    with pytest.raises(ConfigurationError, match="'5'"):
        prepare_pippy(model, split_points=["5"], example_args=(x,))
    piped = prepare_pippy(model, example_args=(x,))
    assert piped.hf_split_points == [] and piped._original_forward is not None
    torch.testing.assert_close(piped(x), expected)

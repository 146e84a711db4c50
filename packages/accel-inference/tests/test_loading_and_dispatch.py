"""Checkpoints into empty models; dispatch with CPU and disk offload equals the plain model."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from accel_checkpoint.weights import save_model_weights
from accel_inference import (
    OffloadedWeightsLoader,
    dispatch_model,
    init_empty_weights,
    load_checkpoint_and_dispatch,
    load_checkpoint_in_model,
    load_state_dict,
    set_module_tensor_to_device,
)
from accel_state.errors import ConfigurationError
from safetensors.torch import save_file

IDS = torch.tensor([[1, 5, 7, 2], [3, 3, 0, 31]])


@pytest.fixture
def saved(models, tmp_path, caplog):
    model = models.trained()
    save_model_weights(model.state_dict(), tmp_path / "ckpt", max_shard_size="3KB")
    assert "Removed shared tensor" in caplog.text
    return model, tmp_path / "ckpt"


def _empty(models, **kwargs):
    with init_empty_weights():
        return models.TinyLM(**kwargs).eval()


def test_sharded_checkpoint_into_empty_model_with_dtype(models, saved, tmp_path):
    model, ckpt = saved
    assert (ckpt / "model.safetensors.index.json").is_file()
    empty = _empty(models)
    load_checkpoint_in_model(empty, ckpt / "model.safetensors.index.json", strict=True)
    assert empty.head.weight is empty.embed.weight  # re-tied after loading
    torch.testing.assert_close(empty(IDS), model(IDS), rtol=0, atol=0)
    half = _empty(models)
    load_checkpoint_in_model(half, ckpt, dtype="bfloat16", keep_in_fp32_modules=["norm"])
    assert half.blocks[0].a.weight.dtype == torch.bfloat16
    assert half.blocks[0].norm.weight.dtype == torch.float32
    assert half.blocks[0].norm.num_batches_tracked.dtype == torch.int64


def test_torch_file_is_read_weights_only(models, saved, tmp_path):
    model, _ = saved
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    empty = _empty(models)
    load_checkpoint_in_model(empty, tmp_path, strict=True)
    torch.testing.assert_close(empty(IDS), model(IDS), rtol=0, atol=0)
    torch.save({"w": torch.ones(1), "evil": object()}, tmp_path / "bad.bin")
    with pytest.raises(Exception, match="[Ww]eights only|weights_only"):
        load_state_dict(tmp_path / "bad.bin")


def test_load_state_dict_reads_each_tensor_to_its_device(saved):
    _, ckpt = saved
    shard = sorted(ckpt.glob("model-*.safetensors"))[0]
    plain = load_state_dict(shard)
    mapped = load_state_dict(shard, device_map={"embed": "disk", "blocks": "cpu", "head": 0,
                                                "scale": "cpu"})
    assert plain.keys() == mapped.keys() and plain
    assert all(torch.equal(plain[k], mapped[k]) and mapped[k].device.type == "cpu"
               for k in plain)


@pytest.mark.parametrize("strategy", ["dict", "auto"])
def test_cpu_and_disk_offload_equal_the_plain_model(models, saved, tmp_path, strategy):
    model, ckpt = saved
    expected = model(IDS)
    empty = _empty(models)
    if strategy == "dict":
        device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks.0": "cpu",
                      "blocks.1": "disk", "blocks.2": "disk", "blocks.3.a": "disk",
                      "blocks.3.b": "cpu", "blocks.3.norm": "disk"}
        kwargs = {"device_map": device_map}
    else:
        block = sum(p.numel() * 4 for p in model.blocks[0].parameters())
        kwargs = {"device_map": "auto", "max_memory": {"cpu": 4 * block},
                  "no_split_module_classes": ["Block"]}
    dispatched = load_checkpoint_and_dispatch(empty, ckpt, offload_folder=tmp_path / "off",
                                              **kwargs)
    assert "disk" in dispatched.hf_device_map.values()
    assert dispatched.blocks[1].a.weight.is_meta  # weights stay on disk between forwards
    index = json.loads((tmp_path / "off" / "index.json").read_text())
    assert "blocks.1.a.weight" in index and (tmp_path / "off" / "blocks.1.a.weight.dat").is_file()
    for _ in range(3):  # the second and third forwards take prefetched weights
        torch.testing.assert_close(dispatched(IDS), expected, rtol=0, atol=0)
    no_prefetch = load_checkpoint_and_dispatch(_empty(models), ckpt, prefetch=False,
                                               offload_folder=tmp_path / "off2", **kwargs)
    torch.testing.assert_close(no_prefetch(IDS), expected, rtol=0, atol=0)


def test_single_device_map_moves_without_hooks(models, saved):
    model, ckpt = saved
    dispatched = load_checkpoint_and_dispatch(_empty(models), ckpt, device_map={"": "cpu"})
    assert not hasattr(dispatched, "_hf_hook") and dispatched.hf_device_map == {"": "cpu"}
    with pytest.raises(ConfigurationError, match="offload_dir"):  # all on disk: where?
        dispatch_model(models.TinyLM(), {"": "disk"})


def test_bad_inputs_name_the_value(models, saved, tmp_path, caplog):
    model, ckpt = saved
    with pytest.raises(ConfigurationError, match="'npu7x'"):
        load_checkpoint_and_dispatch(_empty(models), ckpt, device_map={"": "npu7x"})
    with pytest.raises(ConfigurationError, match="'fastest'"):
        load_checkpoint_and_dispatch(_empty(models), ckpt, device_map="fastest")
    with pytest.raises(ConfigurationError, match="offload_folder"):
        load_checkpoint_and_dispatch(_empty(models), ckpt, device_map={"": "disk"})
    partial = {k: v for k, v in model.state_dict().items() if not k.startswith("blocks.2.")}
    partial.pop("head.weight")
    save_file(partial, tmp_path / "partial.safetensors")
    with pytest.raises(ConfigurationError, match="blocks.2.a.bias"):
        load_checkpoint_in_model(_empty(models), tmp_path / "partial.safetensors")
    built = models.TinyLM()
    with pytest.raises(ConfigurationError, match="blocks.2.a.weight"):
        load_checkpoint_in_model(built, tmp_path / "partial.safetensors", strict=True)
    with caplog.at_level(logging.WARNING, logger="accel.big_modeling"):
        load_checkpoint_in_model(built, tmp_path / "partial.safetensors")
    assert "blocks.2.a.weight" in caplog.text
    (tmp_path / "no_index").mkdir()
    with pytest.raises(ConfigurationError, match="no_index"):
        OffloadedWeightsLoader(save_folder=tmp_path / "no_index")
    with pytest.raises(ConfigurationError, match="weight is on the meta device.*'blocks.0.a"):
        set_module_tensor_to_device(_empty(models), "blocks.0.a.weight", "cpu")
    with pytest.raises(ConfigurationError, match="buffer named nope .*'blocks.0.a.nope'"):
        set_module_tensor_to_device(models.TinyLM(), "blocks.0.a.nope", "cpu")


def test_set_module_tensor_to_device_casts_and_keeps_grad(models):
    model = _empty(models)
    set_module_tensor_to_device(model, "blocks.0.a.weight", "cpu", value=torch.ones(16, 16),
                                dtype=torch.float16)
    weight = model.blocks[0].a.weight
    assert weight.dtype == torch.float16 and weight.requires_grad and not weight.is_meta
    set_module_tensor_to_device(model, "blocks.0.norm.num_batches_tracked", "cpu",
                                value=torch.tensor(3), dtype=torch.float16)
    assert model.blocks[0].norm.num_batches_tracked.dtype == torch.int64

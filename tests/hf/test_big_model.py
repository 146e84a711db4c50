"""``from_pretrained(device_map=...)`` with offload, on accel's big-model code through the shim."""

from __future__ import annotations

import hf_tiny
import pytest
import torch


@pytest.fixture
def saved(tmp_path):
    model = hf_tiny.gpt2().eval()
    model.save_pretrained(tmp_path / "model")
    inputs = torch.randint(3, hf_tiny.VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return tmp_path / "model", inputs, model(inputs).logits


def _hooks(model) -> set[str]:
    return {f"{type(m._hf_hook).__module__}.{type(m._hf_hook).__name__}"
            for m in model.modules() if hasattr(m, "_hf_hook")}


def test_device_map_auto_offloads_to_disk_when_cpu_memory_runs_out(saved, tmp_path):
    from transformers import GPT2LMHeadModel

    path, inputs, expected = saved
    # the whole model is 126 kB: 90 kB of CPU holds the embeddings, the blocks go to disk
    model = GPT2LMHeadModel.from_pretrained(path, device_map="auto", max_memory={"cpu": 90_000},
                                            offload_folder=tmp_path / "offload")
    placed = set(model.hf_device_map.values())
    assert placed == {"cpu", "disk"}, model.hf_device_map
    assert model.hf_device_map["transformer.wte"] == "cpu"
    assert "accel_inference.hooks.AlignDevicesHook" in _hooks(model)
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, expected)


def test_an_explicit_device_map_with_disk_blocks(saved, tmp_path):
    from transformers import GPT2LMHeadModel

    path, inputs, expected = saved
    device_map = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu",
                  "transformer.h.0": "cpu", "transformer.h.1": "disk",
                  "transformer.ln_f": "disk", "lm_head": "cpu"}
    model = GPT2LMHeadModel.from_pretrained(path, device_map=device_map,
                                            offload_folder=tmp_path / "offload")
    assert model.hf_device_map == device_map
    # a disk-offloaded block keeps no weights in memory between forwards
    assert model.transformer.h[1].attn.c_attn.weight.device == torch.device("meta")
    assert model.transformer.h[0].attn.c_attn.weight.device == torch.device("cpu")
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, expected)

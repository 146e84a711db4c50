"""``from_pretrained(max_memory={"cpu": "60KB"})``: transformers hands the caller's dict to
``accelerate.utils.get_max_memory`` and then compares it with the result, so the string sizes
must have become ints in that very dict, as Accelerate leaves them."""

from __future__ import annotations

import hf_tiny
import torch


def test_string_sizes_in_max_memory_with_disk_offload(tmp_path):
    from transformers import GPT2LMHeadModel

    model = hf_tiny.gpt2().eval()
    model.save_pretrained(tmp_path / "model")
    inputs = torch.randint(3, hf_tiny.VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(inputs).logits
    max_memory = {"cpu": "60KB"}
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "model", device_map="auto",
                                             max_memory=max_memory,
                                             offload_folder=tmp_path / "offload")
    assert max_memory == {"cpu": 60_000}
    # the map Accelerate 1.15 makes for this model and budget
    assert loaded.hf_device_map == {
        "transformer.wte": "cpu", "lm_head": "cpu", "transformer.wpe": "disk",
        "transformer.drop": "disk", "transformer.h": "disk", "transformer.ln_f": "disk"}
    with torch.no_grad():
        torch.testing.assert_close(loaded(inputs).logits, expected)

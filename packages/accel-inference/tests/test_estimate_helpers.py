"""accel_inference.estimate_helpers: Accelerate's estimate-memory steps under its names, on a
model built from a local factory (no Hub), and the Hub helpers' answers offline."""

from __future__ import annotations

import argparse

import pytest
from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference import estimate_helpers as helpers
from accel_inference.sizing import compute_module_sizes, get_module_leaves


def tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_create_empty_model_builds_on_meta_and_refuses_a_token():
    model = helpers.create_empty_model(f"{__name__}:tiny", library_name=None)
    assert all(p.device.type == "meta" for p in model.parameters())
    with pytest.raises(ConfigurationError, match="hf auth login"):
        helpers.create_empty_model(f"{__name__}:tiny", None, access_token="hf_x")


def test_gather_data_gives_accelerates_rows():
    args = argparse.Namespace(model_name=f"{__name__}:tiny", library_name=None,
                              trust_remote_code=False, dtypes=["float32", "bfloat16", "int4"])
    rows = helpers.gather_data(args)
    total = (4 * 8 + 8 + 8 * 2 + 2) * 4  # float32 bytes
    largest = (4 * 8 + 8) * 4
    assert [r[:3] for r in rows] == [["float32", largest, total],
                                     ["bfloat16", largest / 2, total / 2],
                                     ["int4", largest / 8, total / 8]]
    assert rows[0][3] == {"model": total, "gradients": total, "optimizer": 2 * total,
                          "step": 4 * total}
    assert rows[2][3] == {"model": -1, "gradients": -1, "optimizer": -1, "step": -1}
    with pytest.raises(ConfigurationError, match="dtype 'float8'"):
        helpers.gather_data(argparse.Namespace(**{**vars(args), "dtypes": ["float8"]}))


def test_estimate_training_usage_follows_accelerates_rule():
    assert helpers.estimate_training_usage(100, "bfloat16") == {
        "model": 100, "gradients": 150, "optimizer": 200, "step": 200}
    assert helpers.estimate_training_usage(100, "fp8", msamp_config="O1")["model"] == -1


def test_the_ascii_table_is_boxed_and_centred():
    table = helpers.create_ascii_table(["dtype", "Total Size"], [["float32", "1 KB"]], "Memory")
    lines = table.splitlines()
    assert lines[0] == "┌" + "─" * 18 + "┐"
    assert lines[1] == "│" + "Memory".center(18) + "│"
    assert lines[3] == "│ dtype │Total Size│"
    assert lines[5] == "│float32│   1 KB   │"
    assert lines[-1] == "└───────┴──────────┘" and len({len(line) for line in lines}) == 1
    wide = helpers.create_ascii_table(["a"], [["1"]], "a long title").splitlines()
    assert len({len(line) for line in wide}) == 1 and "a long title" in wide[1]
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        helpers.create_ascii_table(["a", "b"], [["1"]], "t")


def test_hub_helpers():
    assert helpers.add_timm_hub_prefix("timm/resnet18") == "hf-hub:timm/resnet18"
    assert helpers.add_timm_hub_prefix("resnet18") == "resnet18"
    assert helpers.add_timm_hub_prefix("hf-hub:a/b") == "hf-hub:a/b"
    assert helpers.check_has_model(RuntimeError("Unknown model (x)")) == "timm"
    assert helpers.check_has_model(KeyError("architecture")) == "timm"
    assert helpers.check_has_model(
        OSError("x does not appear to have a file named config.json")) == "transformers"
    assert helpers.check_has_model(ValueError("other")) == "unknown"


def test_verify_on_hub_offline_is_a_clear_error(monkeypatch):
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE"):
        helpers.verify_on_hub("org/model")


def test_module_leaves_are_the_names_without_children():
    sizes = compute_module_sizes(tiny())
    assert get_module_leaves(sizes) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert get_module_leaves({"": 1, "a": 1, "a.b": 1, "c": 1}) == ["a.b", "c"]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.big = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 2))
        self.head = nn.Linear(2, 2)


def test_fallback_allocate_finds_the_first_block_that_fits():
    from accel_inference.fallback import fallback_allocate

    net = _Net()
    sizes = compute_module_sizes(net)
    assert (sizes["big"], sizes["big.0"], sizes["head"]) == (1224, 1088, 24)
    modules = list(net.named_children())
    # big and big.0 are too large, so is big.0.weight; big.0.bias (64 B) fits
    name, block, rest = fallback_allocate(modules, sizes, 200)
    assert name == "big.0.bias" and block is net.big[0].bias
    assert [n for n, _ in rest] == ["big.0.weight", "big.1", "head"]
    assert fallback_allocate(modules, sizes, 5000)[0] == "big"
    assert fallback_allocate(modules, sizes, 4) == (None, None, modules)  # smallest: 8 B
    assert fallback_allocate(modules, sizes, "not a size") == (None, None, modules)
    # a class that must not be split is skipped whole: the next block that fits is head
    name, _, rest = fallback_allocate(modules, sizes, 200, no_split_module_classes=["Sequential"])
    assert name == "head" and [n for n, _ in rest] == ["big"]
    # a tied partner outside the block counts toward its size (head joins big: +8 B)
    tied = [["big.1.weight", "head.weight"]]
    assert fallback_allocate(modules, sizes, 1224)[0] == "big"
    assert fallback_allocate(modules, sizes, 1224, tied_parameters=tied)[0] != "big"
    assert fallback_allocate(modules, sizes, 1232, tied_parameters=tied)[0] == "big"

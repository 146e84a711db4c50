"""``get_state_dict_from_offload`` and ``get_module_size_with_ties`` (transformers imports both)."""

from __future__ import annotations

import pytest
import torch
from accel_inference import (
    compute_module_sizes,
    cpu_offload,
    disk_offload,
    get_module_size_with_ties,
    get_state_dict_from_offload,
)
from accel_state.errors import ConfigurationError
from torch import nn


def _two_layers() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


@pytest.mark.parametrize("offload", ["cpu", "disk"])
def test_offloaded_weights_replace_the_meta_placeholders(offload, tmp_path):
    model = _two_layers()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    if offload == "cpu":
        cpu_offload(model, execution_device="cpu")
    else:
        disk_offload(model, tmp_path, execution_device="cpu")
    state = model.state_dict()
    assert all(v.device.type == "meta" for v in state.values())
    del state["2.bias"]  # entries the caller did not ask for are not added
    out = get_state_dict_from_offload(model[0], "0.weight", state)
    assert out is state
    torch.testing.assert_close(state["0.weight"], expected["0.weight"])
    torch.testing.assert_close(state["0.bias"], expected["0.bias"])
    assert state["2.weight"].device.type == "meta" and "2.bias" not in state
    get_state_dict_from_offload(model[2], "2.weight", state)
    torch.testing.assert_close(state["2.weight"], expected["2.weight"])
    assert "2.bias" not in state
    # the module is offloaded again afterwards
    assert model[0].weight.device.type == "meta"


def test_a_module_that_is_not_offloaded_gives_its_own_tensors():
    model = _two_layers()
    state = {"0.weight": None, "0.bias": None}
    get_state_dict_from_offload(model[0], "0.bias", state, device_to_put_offload="cpu")
    torch.testing.assert_close(state["0.weight"], model[0].weight)
    torch.testing.assert_close(state["0.bias"], model[0].bias)
    # a top-level tensor name has no parent prefix
    root = nn.Linear(2, 2)
    state = {"weight": None}
    get_state_dict_from_offload(root, "weight", state)
    torch.testing.assert_close(state["weight"], root.weight)


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10)  # bias: 10 floats not shared with the embedding
        self.head.weight = self.embed.weight
        self.out = nn.Linear(10, 10)


def test_size_with_ties_adds_the_partner_block_less_the_shared_tensor():
    model = _Tied()
    sizes = compute_module_sizes(model)
    queue = [(n, m) for n, m in model.named_children()]
    assert get_module_size_with_ties([], sizes["embed"], sizes, queue) == (sizes["embed"], [], [])
    size, names, blocks = get_module_size_with_ties(["head.weight"], sizes["embed"], sizes,
                                                    queue[1:])
    assert names == ["head"] and blocks == [model.head]
    # sizes count a tied tensor once (under "embed"): "head" is its bias only
    assert "head.weight" not in sizes and sizes["head"] == 10 * 4
    assert size == sizes["embed"] + sizes["head"] == 40 * 4 + 10 * 4
    # two tied tensors in one partner block: the block counts once per tied tensor, as in
    # Accelerate (placements then match): 100 + (440 - 400) + (440 - 40)
    size, names, _ = get_module_size_with_ties(["out.weight", "out.bias"], 100, sizes, queue)
    assert names == ["out", "out"] and size == 100 + 40 + 400
    # a tensor queued on its own adds nothing beyond itself
    size, names, _ = get_module_size_with_ties(["head.weight"], 7, sizes,
                                               [("head.weight", model.head.weight)])
    assert (size, names) == (7, ["head.weight"])


def test_size_with_ties_names_a_partner_no_queued_block_holds():
    model = _Tied()
    sizes = compute_module_sizes(model)
    with pytest.raises(ConfigurationError, match="'head.weight'"):
        get_module_size_with_ties(["head.weight"], 1, sizes, [("body", model.body)])
    # a name prefix is not a block prefix: "hea" does not hold "head.weight"
    with pytest.raises(ConfigurationError):
        get_module_size_with_ties(["head.weight"], 1, sizes, [("hea", model.head)])

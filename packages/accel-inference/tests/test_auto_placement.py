"""``infer_auto_device_map`` places blocks where Accelerate does (issue 15).

Every expected map below is worked out by hand from the sizes in the comments (float32
``nn.Linear(i, o)`` holds ``4 * (i * o + o)`` bytes; fake GPU ids: placement is arithmetic).
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict

import pytest
import torch
from accel_inference import (
    check_device_map,
    compute_module_sizes,
    find_tied_parameters,
    infer_auto_device_map,
)
from accel_inference.device_map import clean_device_map
from accel_inference.tied import tied_partners
from torch import nn


def _seq(**layers: nn.Module) -> nn.Sequential:
    return nn.Sequential(OrderedDict(layers))


def test_room_is_kept_only_for_layers_still_to_place():
    # a 100, b 64, c 24. GPU 0 keeps room for the largest layer *still queued*:
    # a: keeps 64 (b) -> 136 free, a fits; b: keeps 24 (c) -> 176, 164 fits; c: keeps 0 -> 188
    model = _seq(a=nn.Linear(4, 5), b=nn.Linear(3, 4), c=nn.Linear(2, 2))
    assert [compute_module_sizes(model)[n] for n in "abc"] == [100, 64, 24]
    assert infer_auto_device_map(model, {0: 200, 1: 1000}) == {"": 0}
    # (keeping room for a (100) all along, as before, put b and c on GPU 1 here)
    assert infer_auto_device_map(model, {0: 188, 1: 1000}) == {"": 0}
    # b: 164 > 187 - 24 kept -> GPU 1, and c after it
    assert infer_auto_device_map(model, {0: 187, 1: 1000}) == {"a": 0, "b": 1, "c": 1}


def test_second_gpu_keeps_no_room_and_empty_devices_are_logged(caplog):
    # GPU 0: a (100) > 150 - 64 kept -> empty (needed 100 + 64); GPU 1 keeps nothing: a
    # fits 130, a+b = 164 does not; the CPU keeps 24 (c, largest still queued): b, c fit
    model = _seq(a=nn.Linear(4, 5), b=nn.Linear(3, 4), c=nn.Linear(2, 2))
    with caplog.at_level(logging.INFO, logger="accel.big_modeling"):
        device_map = infer_auto_device_map(model, {0: 150, 1: 130, "cpu": 1000})
    assert device_map == {"a": 1, "b": "cpu", "c": "cpu"}
    assert "insufficient memory" in caplog.text and "0: 164 bytes" in caplog.text


def test_only_mps_keeps_room_when_it_executes():
    # a 100, b 64, c 100; mps 150 keeps 100 (c) -> a does not fit
    model = _seq(a=nn.Linear(4, 5), b=nn.Linear(3, 4), c=nn.Linear(4, 5))
    # mps executes: the CPU keeps no room -> a, b (164) fit 200, c goes to disk
    assert infer_auto_device_map(model, {"mps": 150, "cpu": 200}) == \
        {"a": "cpu", "b": "cpu", "c": "disk"}
    # a GPU executes: the CPU keeps 100 (c) -> a fits the 100 left, b does not
    assert infer_auto_device_map(model, {0: 150, "cpu": 200}) == \
        {"a": "cpu", "b": "disk", "c": "disk"}


def test_a_tied_block_fits_with_its_partners():
    # lin1 <- lin2's weight: sizes lin1 96 (the shared 80 + bias 16), norm 72, lin2 20 (bias).
    # lin1 + its partner lin2 = 116 fit 200 - 72 kept (norm); then norm fits 200 with 0 kept.
    model = _seq(lin1=nn.Linear(3, 4), norm=nn.BatchNorm1d(4), lin2=nn.Linear(4, 5))
    model.lin1.weight = model.lin2.weight
    assert infer_auto_device_map(model, {0: 200, 1: 200}) == {"": 0}


def test_a_tied_partner_block_is_split_when_only_the_block_fits():
    # emb 100 and mid 100 (largest layers), head = proj 20 (bias; its weight is emb's) + extra 64
    model = _seq(emb=nn.Linear(4, 5), mid=nn.Linear(4, 5),
                 head=_seq(proj=nn.Linear(4, 5), extra=nn.Linear(3, 4)))
    model.head.proj.weight = model.emb.weight
    # emb + head = 184 > 230 - 100 kept (mid), emb alone fits: head is split, emb + head.proj
    # = 120 fits; mid: 220 > 230 - 64 kept (head.extra) -> GPU 1 with head.extra
    assert infer_auto_device_map(model, {0: 230, 1: 1000}) == \
        {"emb": 0, "head.proj": 0, "mid": 1, "head.extra": 1}


def test_tied_names_compare_whole_components():
    # layer 2's linear2 shares layer 0's linear1 weight. Matching "1." as a substring would
    # see "0.linear1.weight" inside block "1" and look for its partner after "2" is placed.
    model = nn.Sequential(*(_seq(linear1=nn.Linear(4, 4), linear2=nn.Linear(4, 4))
                            for _ in range(3)))
    model[2].linear2.weight = model[0].linear1.weight
    groups = find_tied_parameters(model)
    assert groups == [["0.linear1.weight", "2.linear2.weight"]]
    assert tied_partners("1", groups) == []
    assert tied_partners("0", groups) == ["2.linear2.weight"]
    assert infer_auto_device_map(model, {0: 10**6}) == {"": 0}


def _buffered() -> nn.Sequential:
    # a: 100 params + 100 buffer = 200; b: 64 params + 80 buffer = 144
    model = _seq(a=nn.Linear(4, 5), b=nn.Linear(3, 4))
    model.a.register_buffer("extra", torch.zeros(25))
    model.b.register_buffer("extra", torch.zeros(20))
    return model


def test_buffers_of_offloaded_blocks_warn_when_they_fit_no_gpu():
    model = _buffered()
    # a: 200 > 300 - 144 kept (b) -> GPU 0 empty, counts 144 used; the CPU takes both.
    # Their 180 B of buffers run on GPU 0: 180 + 144 > 300 warns, <= 330 does not.
    with pytest.warns(UserWarning, match="offload_buffers=True"):
        assert infer_auto_device_map(model, {0: 300, "cpu": 10**4}) == {"": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert infer_auto_device_map(model, {0: 330, "cpu": 10**4}) == {"": "cpu"}
        assert infer_auto_device_map(model, {0: 300, "cpu": 10**4},
                                     offload_buffers=True) == {"": "cpu"}


def test_offload_buffers_does_not_change_where_blocks_go():
    # the CPU keeps 144 (b): a (200, buffers included) > 320 - 144 -> disk, b follows.
    # (Counting a without its buffers, 100, put it on the CPU before.)
    model = _buffered()
    for offload_buffers in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            device_map = infer_auto_device_map(model, {0: 300, "cpu": 320},
                                               offload_buffers=offload_buffers)
        assert device_map == {"": "disk"}


def test_fallback_searches_inside_later_blocks(caplog):
    # big 16640; rest = mid 1088 + tiny 24. GPU 0 keeps 1088 (mid): big > 17000 - 1088.
    model = _seq(big=nn.Linear(64, 64), rest=_seq(mid=nn.Linear(16, 16), tiny=nn.Linear(2, 2)))
    memory = {0: 17000, "cpu": 10**6}
    with caplog.at_level(logging.INFO, logger="accel.big_modeling"):
        assert infer_auto_device_map(model, memory) == {"": "cpu"}
    assert "0: 17728 bytes" in caplog.text  # big + the room kept
    # fallback: room 17000 - max(1088, 16640) = 360; rest (1112) is split, mid is too big,
    # tiny fits: it goes to GPU 0 and the rest moves on
    assert infer_auto_device_map(model, memory, fallback_allocation=True) == \
        {"big": "cpu", "rest.mid": "cpu", "rest.tiny": 0}


def test_verbose_prints_each_decision(capsys):
    model = _seq(a=nn.Linear(4, 5), b=nn.Linear(3, 4), c=nn.Linear(2, 2))
    infer_auto_device_map(model, {0: 187, 1: 1000}, verbose=True)
    out = capsys.readouterr().out
    assert "Putting a (100 bytes, 123 bytes left) on 0." in out
    assert "Moving on from 0." in out and "Putting c" in out


def test_clean_device_map_merges_a_single_part_and_works_in_place():
    raw = {"a.x": 0, "b.y.z": 1, "b.w": "cpu", "c": "cpu"}
    cleaned = clean_device_map(raw)
    assert cleaned is raw
    assert list(raw.items()) == [("a", 0), ("b.y", 1), ("b.w", "cpu"), ("c", "cpu")]
    assert clean_device_map({"x.0": 0, "x.1": 0, "y": 1}, module_name="x") == {"x": 0, "y": 1}


def test_a_split_module_keeps_its_direct_buffers_in_the_map():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 5)  # 100
            self.b = nn.Linear(4, 5)  # 100
            self.register_buffer("scale", torch.zeros(10))  # 40

    # p (240) > 250 - 64 kept (q): split into p.a, p.b, p.scale; p.a fits 250 - 100 (p.b);
    # p.b: 200 > 250 - 64 -> the CPU, with p.scale and q
    model = _seq(p=Holder(), q=nn.Linear(3, 4))
    device_map = infer_auto_device_map(model, {0: 250, "cpu": 10**4})
    assert device_map == {"p.a": 0, "p.b": "cpu", "p.scale": "cpu", "q": "cpu"}
    check_device_map(model, device_map)


def test_no_split_module_classes_may_be_a_set():
    # x (a 100 + b 100) > 250 - 64 kept (y): kept whole it goes to GPU 1 with y; split,
    # x.a fits 250 - 100 (x.b) and x.b (200 > 250 - 64) moves on
    model = _seq(x=_seq(a=nn.Linear(4, 5), b=nn.Linear(4, 5)), y=nn.Linear(3, 4))
    memory = {0: 250, 1: 1000}
    assert infer_auto_device_map(model, memory, no_split_module_classes={"Sequential"}) == \
        infer_auto_device_map(model, memory, no_split_module_classes=["Sequential"]) == \
        infer_auto_device_map(model, memory, no_split_module_classes="Sequential") == {"": 1}
    assert infer_auto_device_map(model, memory) == {"x.a": 0, "x.b": 1, "y": 1}

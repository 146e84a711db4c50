"""Namedtuples through the structure helpers as in Accelerate 1.15 (issue 24): rebuilt with
positional arguments, so a namedtuple whose constructor takes its fields (not one iterable)
keeps its type, its defaults and its own ``__new__``, at any depth."""

from __future__ import annotations

from collections import namedtuple
from typing import NamedTuple

import pytest
import torch
from accel_state.structures import concatenate, honor_type, recursively_apply, send_to_device

Pair = namedtuple("Pair", "a b")


class Typed(NamedTuple):
    value: torch.Tensor
    count: int = 3


class Custom(namedtuple("_Custom", "a b")):
    """A constructor of its own that only takes the fields positionally."""

    def __new__(cls, a, b=None):
        return super().__new__(cls, a, b)


class LooksLikeOne(tuple):
    """Not a namedtuple but has its markers: Accelerate unpacks it too."""

    _fields = ("a",)

    def _asdict(self):
        return {}


def _cases():
    t = torch.ones(2)
    return [Pair(t, 1), Typed(t), Custom(t, 4), [Pair(t, [t])], (Typed(t, 5),),
            {"k": Custom(t, Pair(t, 2))}]


@pytest.mark.parametrize("data", _cases(), ids=lambda d: type(d).__name__)
def test_recursively_apply_and_send_to_device_keep_every_namedtuple(data):
    for out in (recursively_apply(lambda x: x + 1, data), send_to_device(data, "meta")):
        assert _shape(out) == _shape(data)


def _shape(data):
    """Types and non-tensor leaves, the way the helpers must keep them."""
    if isinstance(data, torch.Tensor):
        return "tensor"
    if isinstance(data, dict):
        return {k: _shape(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data), [_shape(v) for v in data]
    return data


def test_values_are_the_applied_ones_in_field_order():
    out = recursively_apply(lambda x: x * 2, Typed(torch.tensor([1.0]), 7))
    assert type(out) is Typed and out.count == 7 and out.value.tolist() == [2.0]
    moved = send_to_device(Custom(torch.ones(1), None), "meta")
    assert type(moved) is Custom and moved.a.is_meta and moved.b is None


def test_honor_type_passes_the_fields_positionally():
    assert honor_type(Pair(0, 0), iter([1, 2])) == Pair(1, 2)
    assert honor_type(Custom(0, 0), (v for v in [5, 6])) == Custom(5, 6)
    with pytest.raises(TypeError):  # too many fields: positional, not one iterable
        honor_type(Pair(0, 0), iter([1, 2, 3]))
    # duck-typed markers: unpacked as Accelerate does, so a tuple subclass gets the items
    assert honor_type(LooksLikeOne([0]), iter(["xy"])) == ("x", "y")
    assert honor_type(torch.Size([1, 2]), iter([3, 4])) == torch.Size([3, 4])


def test_concatenate_rebuilds_namedtuples_too():
    parts = [Typed(torch.ones(1), 1), Typed(torch.zeros(1), 1)]
    with pytest.raises(TypeError, match="int"):  # its int field cannot be concatenated
        concatenate(parts)
    both = concatenate([Pair(torch.ones(1), torch.ones(2)), Pair(torch.zeros(1), torch.ones(2))])
    assert type(both) is Pair and both.a.tolist() == [1.0, 0.0] and both.b.shape == (4,)

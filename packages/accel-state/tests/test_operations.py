"""Structure helpers and single-process collectives of accel_state.operations.

Multi-process behaviour (values per rank, padding, debug-mode mismatches) is checked by
``tests/integration/scripts/ops_checks.py``; here every collective must be the identity
for one process, with and without a (1-process, gloo) process group.
"""

from __future__ import annotations

import pickle
import warnings
from collections import OrderedDict, UserDict, defaultdict, namedtuple
from typing import NamedTuple

import pytest
import torch
import torch.distributed as dist
from accel_state import env
from accel_state.errors import (
    ConfigurationError,
    DistributedError,
    DistributedOperationException,
)
from accel_state.groups import source_rank as _source_rank
from accel_state.operations import (
    CannotPadNestedTensorWarning,
    GatheredParameters,
    TensorInformation,
    _broadcast_one,
    _collective_device,
    _gather_one,
    _reduce_one,
    broadcast,
    broadcast_object_list,
    chained_operation,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    copy_tensor_to_devices,
    find_batch_size,
    find_device,
    gather,
    gather_object,
    get_data_structure,
    get_shape,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_tensor_information,
    is_torch_tensor,
    listify,
    pad_across_processes,
    pad_input_tensors,
    recursively_apply,
    reduce,
    send_to_device,
    slice_tensors,
    verify_operation,
)

Point = namedtuple("Point", ["x", "y"])


class Quant(NamedTuple):
    value: torch.Tensor
    scale: torch.Tensor | None


class QuantChild(Quant):
    pass


class Encoding(UserDict):
    """Stands in for transformers.BatchEncoding: a mapping that moves itself with ``.to``."""

    calls = 0

    def to(self, device, non_blocking=False):
        Encoding.calls += 1
        return Encoding({k: v.to(device) if torch.is_tensor(v) else v for k, v in self.items()})


class OldStyleTo:
    """An object whose ``.to`` does not accept ``non_blocking``."""

    def __init__(self) -> None:
        self.device = None

    def to(self, device):
        self.device = device
        return self


# --- structure helpers ---------------------------------------------------------------------

def test_type_predicates():
    assert is_torch_tensor(torch.ones(1)) and not is_torch_tensor([1])
    assert is_tensor_information(TensorInformation(torch.Size([1]), torch.float32))
    assert not is_tensor_information(torch.ones(1))
    assert is_namedtuple(Point(1, 2)) and is_namedtuple(Quant(torch.ones(1), None))
    assert is_namedtuple(QuantChild(torch.ones(1), None))
    assert not is_namedtuple((1, 2)) and not is_namedtuple("hey") and not is_namedtuple(object())


def test_honor_type_keeps_container_types():
    assert honor_type(Point(1, 2), (v * 2 for v in (1, 2))) == Point(2, 4)
    assert type(honor_type((1,), iter([5]))) is tuple
    assert honor_type([1], iter([5])) == [5]
    assert honor_type(torch.Size([1, 2]), iter([3, 4])) == torch.Size([3, 4])


def test_recursively_apply_keeps_nesting_and_mapping_types():
    data = {"a": [torch.ones(1), (torch.zeros(2), "text")], "b": Point(torch.ones(1), 3)}
    out = recursively_apply(lambda t: t + 1, data)
    assert out["a"][0].item() == 2 and out["a"][1][0].tolist() == [1, 1]
    assert out["a"][1][1] == "text" and isinstance(out["b"], Point) and out["b"].y == 3
    ordered = recursively_apply(lambda t: t * 0, OrderedDict(k=torch.ones(1)))
    assert isinstance(ordered, OrderedDict)
    factory = defaultdict(list, k=torch.ones(1))
    out = recursively_apply(lambda t: t * 0, factory)
    assert isinstance(out, defaultdict) and out.default_factory is list
    assert recursively_apply(lambda x: x * 10, [1, "a"], test_type=lambda x: isinstance(x, int)) \
        == [10, "a"]


def test_recursively_apply_error_on_other_type_names_the_type():
    def double(t):
        return t * 2

    with pytest.raises(TypeError, match=r"'str'.*`double`"):
        recursively_apply(double, [torch.ones(1), "x"], error_on_other_type=True)


def test_send_to_device_moves_every_container_kind():
    t = torch.ones(2, 2)
    assert send_to_device(t, "meta").device.type == "meta"
    out = send_to_device((t, [t, t], 1, "s", None), "meta")
    assert isinstance(out, tuple) and isinstance(out[1], list)
    assert out[0].is_meta and out[1][1].is_meta and out[2:] == (1, "s", None)
    out = send_to_device({"a": t, "b": {"c": [t]}, "n": 3}, torch.device("meta"))
    assert out["a"].is_meta and out["b"]["c"][0].is_meta and out["n"] == 3
    out = send_to_device(Point(t, [t]), "meta")
    assert isinstance(out, Point) and out.x.is_meta and out.y[0].is_meta
    out = send_to_device(QuantChild(t, None), "meta")
    assert isinstance(out, QuantChild) and out.value.is_meta and out.scale is None
    out = send_to_device(OrderedDict(a=t), "meta")
    assert isinstance(out, OrderedDict) and out["a"].is_meta
    assert send_to_device("text", "meta") == "text"
    module = send_to_device(torch.nn.Linear(2, 2), "meta")
    assert module.weight.is_meta


def test_send_to_device_uses_a_mappings_own_to_unless_keys_are_skipped():
    t = torch.ones(2)
    Encoding.calls = 0
    out = send_to_device(Encoding(ids=t, mask=t), "meta")
    assert isinstance(out, Encoding) and out["ids"].is_meta and Encoding.calls == 1
    out = send_to_device(Encoding(ids=t, mask=t), "meta", skip_keys="mask")
    assert isinstance(out, Encoding) and Encoding.calls == 1
    assert out["ids"].is_meta and out["mask"].device.type == "cpu"


def test_send_to_device_skip_keys_str_or_list_at_any_depth():
    t = torch.ones(1)
    batch = {"a": t, "b": t, "inner": {"a": t, "c": t}}
    out = send_to_device(batch, "meta", skip_keys=["a", "b"])
    assert out["a"] is t and out["b"] is t and out["inner"]["a"] is t
    assert out["inner"]["c"].is_meta
    out = send_to_device(batch, "meta", skip_keys="b")
    assert out["a"].is_meta and out["b"] is t


def test_send_to_device_objects_with_to():
    obj = OldStyleTo()
    assert send_to_device([obj], "meta", non_blocking=True)[0].device == "meta"
    packed = torch.nn.utils.rnn.pack_sequence([torch.ones(3), torch.ones(2)])
    moved = send_to_device(packed, "meta")
    assert isinstance(moved, torch.nn.utils.rnn.PackedSequence)
    assert moved.data.is_meta and moved.batch_sizes.device.type == "cpu"


def test_send_to_device_traces_under_torch_compile():
    compiled = torch.compile(send_to_device, fullgraph=True, backend="eager")
    out = compiled({"x": torch.zeros(1, dtype=torch.bfloat16), "y": (torch.ones(2),)}, "cpu")
    assert out["x"].dtype == torch.bfloat16 and out["y"][0].tolist() == [1.0, 1.0]


def test_data_structure_round_trip_and_shapes():
    data = {"a": torch.ones(2, 3), "b": [torch.zeros(4, dtype=torch.int64)]}
    info = get_data_structure(data)
    assert info["a"] == TensorInformation(torch.Size([2, 3]), torch.float32)
    rebuilt = initialize_tensors(info)
    assert rebuilt["a"].shape == (2, 3) and rebuilt["b"][0].dtype == torch.int64
    assert get_shape(data) == {"a": [2, 3], "b": [[4]]}


def test_listify_handles_bf16_and_nesting():
    out = listify({"a": torch.tensor([1.5], dtype=torch.bfloat16), "b": (torch.tensor(2),)})
    assert out == {"a": [1.5], "b": (2,)}


def test_find_batch_size():
    assert find_batch_size({"x": [torch.ones(5, 2)], "y": torch.ones(3)}) == 5
    assert find_batch_size((torch.ones(7),)) == 7
    with pytest.raises(ValueError, match="empty"):
        find_batch_size([])
    with pytest.raises(TypeError, match="str"):
        find_batch_size(["a"])
    assert ignorant_find_batch_size({}) is None and ignorant_find_batch_size([1]) is None
    assert ignorant_find_batch_size(torch.ones(4)) == 4


def test_find_device():
    assert find_device({"a": "x", "b": [1, torch.ones(1, device="meta")]}).type == "meta"
    assert find_device(["no", {"tensors": 1}]) is None
    assert find_device(torch.ones(1)).type == "cpu"


def test_concatenate():
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(concatenate([a, b]), torch.cat([a, b]))
    assert concatenate(["only"]) == "only"
    out = concatenate([(a, {"k": [b]}), (b, {"k": [a]})])
    assert isinstance(out, tuple) and out[0].shape == (4, 3)
    assert torch.equal(out[1]["k"][0], torch.cat([b, a]))
    assert concatenate([a.unsqueeze(0), b.unsqueeze(0)], dim=1).shape == (1, 4, 3)
    with pytest.raises(TypeError, match="str"):
        concatenate([{"s": "x"}, {"s": "y"}])


def test_slice_tensors():
    data = {"x": torch.arange(10), "y": [torch.arange(10) * 2], "z": "keep"}
    out = slice_tensors(data, slice(2, 4), process_index=1, num_processes=2)
    assert out["x"].tolist() == [2, 3] and out["y"][0].tolist() == [4, 6] and out["z"] == "keep"


@pytest.mark.parametrize(("procs", "size", "expected"), [
    (2, 1, 2), (2, 3, 4), (3, 4, 6), (4, 3, 4), (6, 4, 6), (6, 1, 6), (6, 2, 6), (6, 61, 66),
    (4, 8, 8)])
def test_pad_input_tensors_to_a_multiple(procs, size, expected):
    batch = torch.rand(size, 4, 4)
    assert pad_input_tensors(batch, size, procs).shape == (expected, 4, 4)


def test_pad_input_tensors_repeats_the_last_item_along_dim():
    batch = {"ids": torch.tensor([[1, 2, 3]])}
    out = pad_input_tensors(batch, 3, 2, dim=1)
    assert out["ids"].tolist() == [[1, 2, 3, 3]]
    assert pad_input_tensors(torch.arange(3), 3, 2).tolist() == [0, 1, 2, 2]


def test_convert_to_fp32_only_touches_half_tensors():
    data = {"h": torch.ones(1, dtype=torch.float16), "b": [torch.ones(1, dtype=torch.bfloat16)],
            "d": torch.ones(1, dtype=torch.float64), "i": torch.ones(1, dtype=torch.int64)}
    out = convert_to_fp32(data)
    assert out["h"].dtype == torch.float32 and out["b"][0].dtype == torch.float32
    assert out["d"].dtype == torch.float64 and out["i"].dtype == torch.int64
    compiled = torch.compile(convert_to_fp32, fullgraph=True, backend="eager")
    assert compiled(torch.zeros(1, dtype=torch.bfloat16)).dtype == torch.float32


def _half_forward(x):
    return {"logits": x.half(), "aux": (x.bfloat16(), 3)}


def test_convert_outputs_to_fp32_wraps_and_pickles():
    wrapped = convert_outputs_to_fp32(_half_forward)
    out = wrapped(torch.ones(2))
    assert out["logits"].dtype == torch.float32 and out["aux"][0].dtype == torch.float32
    assert wrapped.model_forward is _half_forward and wrapped.__wrapped__ is _half_forward
    assert wrapped.__name__ == "_half_forward"
    again = pickle.loads(pickle.dumps(wrapped))
    assert again(torch.ones(1))["logits"].dtype == torch.float32


def test_convert_outputs_to_fp32_on_a_bound_forward():
    model = torch.nn.Linear(2, 2).half()
    model.forward = convert_outputs_to_fp32(model.forward)
    assert model(torch.ones(1, 2, dtype=torch.float16)).dtype == torch.float32
    assert pickle.loads(pickle.dumps(model)).weight.dtype == torch.float16


# --- collectives with one process ----------------------------------------------------------

def _check_identity_collectives():
    t = torch.tensor([1.0, 3.0])
    nested = {"a": t, "b": (torch.tensor(2.0),)}
    assert gather(t) is t and gather(nested) is nested
    assert gather_object([1, 2]) == [1, 2] and gather_object((1, 2)) == [1, 2]
    assert gather_object({"k": 1}) == [{"k": 1}] and gather_object("ab") == ["ab"]
    assert broadcast(nested, from_process=0) is nested
    objects = ["x", None]
    assert broadcast_object_list(objects) is objects and objects == ["x", None]
    for reduction in ("mean", "sum", "max", "none"):
        out = reduce(t, reduction=reduction)
        assert out is not t and out.tolist() == [1.0, 3.0]
    assert reduce(nested, "sum", scale=2.0)["b"][0].item() == 4.0
    assert reduce(torch.tensor([3]), "mean").tolist() == [3.0]
    assert pad_across_processes(t) is t
    assert copy_tensor_to_devices(t) is t


def test_collectives_without_process_group():
    assert not dist.is_initialized()
    _check_identity_collectives()


def test_collectives_with_one_process_group_and_debug_mode(gloo_group, monkeypatch):
    monkeypatch.setenv(env.DEBUG_MODE.name, "1")
    _check_identity_collectives()


def test_collective_kernels_run_on_a_real_group(gloo_group):
    # the per-tensor bodies used with several processes, run for real on a 1-process group
    assert _gather_one(torch.tensor(5.0), 1).tolist() == [5.0]
    assert _gather_one(torch.arange(6).reshape(2, 3).t(), 1).shape == (3, 2)
    assert _broadcast_one(torch.ones(2), 0).tolist() == [1.0, 1.0]
    assert _reduce_one(torch.tensor([4]), 1, "mean", 0.5).tolist() == [2.0]
    assert _collective_device() == torch.device("cpu")


def test_reduce_takes_max_and_rejects_other_names():
    t = torch.tensor([1.0, 3.0])
    out = reduce(t, reduction="max")  # Accelerate's documented "mean", "sum", "max", "none"
    assert out is not t and out.tolist() == [1.0, 3.0]
    for name in ("min", "avg"):  # Accelerate would sum silently; accel names the choices
        with pytest.raises(ConfigurationError, match=f"'{name}'.*'max'"):
            reduce(torch.ones(1), reduction=name)


def test_collectives_refuse_non_tensor_leaves():
    with pytest.raises(TypeError):
        reduce({"a": "text"})
    with pytest.raises(TypeError):
        pad_across_processes([torch.ones(1), 3])


def test_pad_across_processes_single_process_edge_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)])
    with pytest.warns(CannotPadNestedTensorWarning):
        assert pad_across_processes(nested) is nested
    t = torch.randn(4, 3, 10)
    assert pad_across_processes(t, dim=-1) is t and pad_across_processes(t, dim=-4) is t


def test_copy_tensor_to_devices_needs_a_tensor_somewhere():
    with pytest.raises(DistributedError, match="None on every process"):
        copy_tensor_to_devices(None)


def test_verify_and_chained_operation_decorators():
    @verify_operation
    def op(tensor, factor=1):
        return tensor * factor

    assert op(torch.ones(1), factor=3).item() == 3.0 and op(tensor=torch.ones(1)).item() == 1.0
    assert op.__name__ == "op"

    @chained_operation
    def outer():
        raise DistributedOperationException("inner detail")

    with pytest.raises(DistributedOperationException, match="outer.*inner detail") as info:
        outer()
    assert isinstance(info.value.__cause__, DistributedOperationException)


def test_gathered_parameters_is_a_no_op_outside_zero3():
    layer = torch.nn.Linear(2, 2)
    context = GatheredParameters(layer.parameters(), modifier_rank=0)
    assert isinstance(context.params, list) and len(context.params) == 2
    with context as entered:
        layer.weight.data.zero_()
    assert entered is context and layer.weight.abs().sum().item() == 0
    with GatheredParameters(layer.weight, enabled=False):
        pass


def test_convert_outputs_to_fp32_as_a_method_keeps_the_unwrap_chain():
    # the pattern precision wrappers use: MethodType over the plain function
    from types import MethodType

    model = torch.nn.Linear(2, 2).half()
    original = model.forward
    model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)
    assert model(torch.ones(1, 2, dtype=torch.float16)).dtype == torch.float32
    assert model.forward.__func__.__wrapped__ is original.__func__


# --- group= (a data-parallel subgroup under tensor parallelism) ----------------------------

def _check_group_collectives(group):
    t = torch.tensor([1.0, 3.0])
    nested = {"a": t, "b": (torch.tensor(2.0),)}
    assert gather(t, group=group) is t and gather(nested, group=group) is nested
    assert gather_object([1, 2], group=group) == [1, 2]
    assert gather_object("ab", group=group) == ["ab"]
    assert broadcast(nested, 0, group=group) is nested
    objects = ["x", None]
    assert broadcast_object_list(objects, from_process=0, group=group) is objects
    assert reduce(t, "mean", group=group).tolist() == [1.0, 3.0]
    assert reduce(nested, "sum", scale=2.0, group=group)["b"][0].item() == 4.0
    assert pad_across_processes(t, group=group) is t


def test_collectives_take_a_group_on_a_real_one_process_subgroup(gloo_group, monkeypatch):
    group = dist.new_group([0])
    _check_group_collectives(group)
    _check_group_collectives(dist.group.WORLD)  # the default group, passed explicitly
    monkeypatch.setenv(env.DEBUG_MODE.name, "1")
    _check_group_collectives(group)
    # the kernels used with several processes, run for real on the subgroup
    assert _gather_one(torch.tensor(5.0), 1, group).tolist() == [5.0]
    assert _broadcast_one(torch.ones(2), 0, group).tolist() == [1.0, 1.0]
    assert _reduce_one(torch.tensor([4]), 1, "sum", 1.0, group).tolist() == [4]


def test_from_process_is_a_rank_within_the_group(gloo_group):
    group = dist.new_group([0])
    assert _source_rank(0, group) == 0 and _source_rank(7, None) == 7  # None: global, as is
    with pytest.raises(ConfigurationError, match="from_process=1 is not a rank of group"):
        _source_rank(1, group)


def test_a_group_without_torch_distributed_names_the_argument_and_the_fix(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    stale = dist.new_group([0])
    dist.destroy_process_group()  # `stale` outlives its process group
    t = torch.ones(2)
    calls = [lambda: gather(t, group=stale), lambda: gather_object([1], group=stale),
             lambda: broadcast(t, group=stale), lambda: broadcast_object_list([1], group=stale),
             lambda: reduce(t, group=stale), lambda: pad_across_processes(t, group=stale)]
    for call in calls:
        with pytest.raises(ConfigurationError, match="group=.*not initialised.*init_process_group"):
            call()
    assert issubclass(ConfigurationError, ValueError)
    assert gather(t) is t and reduce(t, "sum").tolist() == [1.0, 1.0]  # group=None: as before


def test_group_is_keyword_only_so_accelerate_positional_calls_keep_their_meaning():
    import inspect

    for op in (gather, gather_object, broadcast, broadcast_object_list, reduce,
               pad_across_processes):
        parameter = inspect.signature(op).parameters["group"]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None

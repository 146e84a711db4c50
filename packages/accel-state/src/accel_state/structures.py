"""Pure helpers over nested structures of tensors (lists, tuples, namedtuples, mappings).

Nothing here talks to other processes: these are the building blocks the collectives
in :mod:`accel_state.operations` (and the data loaders, precision wrappers, hooks of
the other packages) apply to whatever nesting a user's batch or model output has.
Names and behaviour follow ``accelerate.utils.operations``.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "TensorInformation",
    "CannotPadNestedTensorWarning",
    "is_torch_tensor",
    "is_tensor_information",
    "is_namedtuple",
    "honor_type",
    "recursively_apply",
    "send_to_device",
    "get_data_structure",
    "get_shape",
    "initialize_tensors",
    "listify",
    "find_batch_size",
    "ignorant_find_batch_size",
    "find_device",
    "concatenate",
    "slice_tensors",
    "pad_input_tensors",
    "convert_to_fp32",
    "ConvertOutputsToFp32",
    "convert_outputs_to_fp32",
]

_Tensor = torch.Tensor


@dataclass
class TensorInformation:
    """Shape and dtype of a tensor: enough to allocate a receive buffer for it."""

    shape: torch.Size
    dtype: torch.dtype


class CannotPadNestedTensorWarning(UserWarning):
    """``pad_across_processes`` met a nested tensor, which has no single size to pad."""


def is_torch_tensor(tensor: Any) -> bool:
    return isinstance(tensor, _Tensor)


def is_tensor_information(tensor_info: Any) -> bool:
    return isinstance(tensor_info, TensorInformation)


def is_namedtuple(data: Any) -> bool:
    """True for instances of ``collections.namedtuple``/``typing.NamedTuple`` (and subclasses)."""
    return isinstance(data, tuple) and hasattr(data, "_asdict") and hasattr(data, "_fields")


def honor_type(obj: Any, generator: Any) -> Any:
    """Build a container of ``obj``'s type (list, tuple, namedtuple, ...) from ``generator``."""
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(generator)


def _rebuild_mapping(original: Mapping, items: dict) -> Any:
    """A mapping of ``original``'s type holding ``items`` (``defaultdict`` keeps its factory)."""
    kind = type(original)
    if kind is dict:
        return items
    if isinstance(original, defaultdict):
        return kind(original.default_factory, items)
    return kind(items)


def recursively_apply(func: Callable[..., Any], data: Any, *args: Any,
                      test_type: Callable[[Any], bool] = is_torch_tensor,
                      error_on_other_type: bool = False, **kwargs: Any) -> Any:
    """Apply ``func`` to every leaf of ``data`` that passes ``test_type``; keep the nesting.

    Other leaves are returned unchanged, or raise ``TypeError`` with ``error_on_other_type``.
    """
    if isinstance(data, (tuple, list)):
        return honor_type(data, (recursively_apply(func, o, *args, test_type=test_type,
                                                   error_on_other_type=error_on_other_type,
                                                   **kwargs) for o in data))
    if isinstance(data, Mapping):
        return _rebuild_mapping(data, {
            k: recursively_apply(func, v, *args, test_type=test_type,
                                 error_on_other_type=error_on_other_type, **kwargs)
            for k, v in data.items()})
    if test_type(data):
        return func(data, *args, **kwargs)
    if error_on_other_type:
        name = getattr(func, "__name__", repr(func))
        raise TypeError(
            f"Unsupported type {type(data).__name__!r} passed to `{name}`: only nested "
            f"lists/tuples/dicts of objects accepted by `{test_type.__name__}` can be used. "
            "Convert that value to a tensor or remove it from the structure."
        )
    return data


def send_to_device(tensor: Any, device: Any, non_blocking: bool = False,
                   skip_keys: str | list[str] | tuple[str, ...] | None = None) -> Any:
    """Move every tensor (or object with a ``.to`` method) in a nested structure to ``device``.

    Lists, tuples and namedtuples keep their type; mappings keep theirs too. A mapping
    that has its own ``.to`` (e.g. ``transformers.BatchEncoding``) is moved with it,
    unless ``skip_keys`` names keys to leave where they are. On the hot path of every
    batch, so a plain tensor goes straight to ``Tensor.to``.
    """
    if isinstance(tensor, _Tensor):
        if isinstance(device, str) and (device == "npu" or device == "xpu"):
            device = device + ":0"  # bare "npu"/"xpu" fails on the first call of some builds
        # `non_blocking=` as a keyword costs about half a microsecond: pass it only when set
        return tensor.to(device, non_blocking=True) if non_blocking else tensor.to(device)
    if isinstance(device, str) and (device == "npu" or device == "xpu"):
        device = device + ":0"
    if skip_keys is None:
        skip: frozenset | tuple = ()
    elif isinstance(skip_keys, str):
        skip = (skip_keys,)
    else:
        skip = frozenset(skip_keys)
    return _send(tensor, device, non_blocking, skip)


def _send(obj: Any, device: Any, non_blocking: bool, skip: Any) -> Any:
    # Tensor leaves are moved inline in the comprehensions: one call less per tensor.
    if isinstance(obj, _Tensor):
        return obj.to(device, non_blocking=True) if non_blocking else obj.to(device)
    cls = type(obj)
    if cls is tuple or cls is list:
        items = [(o.to(device, non_blocking=True) if non_blocking else o.to(device))
                 if isinstance(o, _Tensor) else _send(o, device, non_blocking, skip)
                 for o in obj]
        return items if cls is list else tuple(items)
    if cls is dict:
        return {k: (v if k in skip else
                    ((v.to(device, non_blocking=True) if non_blocking else v.to(device))
                     if isinstance(v, _Tensor) else _send(v, device, non_blocking, skip)))
                for k, v in obj.items()}
    # `.to` first: some tuples move themselves (PackedSequence keeps batch_sizes on CPU).
    if hasattr(obj, "to") and not (skip and isinstance(obj, Mapping)):
        return _call_to(obj, device, non_blocking)
    if isinstance(obj, (tuple, list)):
        return honor_type(obj, (_send(o, device, non_blocking, skip) for o in obj))
    if isinstance(obj, Mapping):
        return _rebuild_mapping(obj, {
            k: v if k in skip else _send(v, device, non_blocking, skip) for k, v in obj.items()})
    return obj


def _call_to(obj: Any, device: Any, non_blocking: bool) -> Any:
    try:
        return obj.to(device, non_blocking=non_blocking)
    except TypeError:  # a `.to` that does not take `non_blocking`
        return obj.to(device)


def get_data_structure(data: Any) -> Any:
    """``data`` with each tensor replaced by its :class:`TensorInformation`."""
    return recursively_apply(lambda t: TensorInformation(shape=t.shape, dtype=t.dtype), data)


def get_shape(data: Any) -> Any:
    """``data`` with each tensor replaced by its shape as a list (picklable, comparable)."""
    return recursively_apply(lambda t: list(t.shape), data)


def initialize_tensors(data_structure: Any) -> Any:
    """Allocate (uninitialised) tensors matching a structure of :class:`TensorInformation`."""
    return recursively_apply(lambda info: torch.empty(*info.shape, dtype=info.dtype),
                             data_structure, test_type=is_tensor_information)


def listify(data: Any) -> Any:
    """``data`` with each tensor turned into (nested) Python numbers via ``tolist``."""

    def _to_list(tensor: torch.Tensor) -> Any:
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy (behind tolist) has no bfloat16
            tensor = tensor.float()
        return tensor.tolist()

    return recursively_apply(_to_list, data)


def find_batch_size(data: Any) -> int:
    """Size of dim 0 of the first tensor found (depth-first) in ``data``."""
    if isinstance(data, (tuple, list, Mapping)) and len(data) == 0:
        raise ValueError(f"Cannot find the batch size of an empty {type(data).__name__}; "
                         "pass a structure that holds at least one tensor.")
    if isinstance(data, (tuple, list)):
        return find_batch_size(data[0])
    if isinstance(data, Mapping):
        return find_batch_size(next(iter(data.values())))
    if not isinstance(data, _Tensor):
        raise TypeError(f"Can only find the batch size of tensors, but got a "
                        f"{type(data).__name__}; pass tensors (or nests of them).")
    return data.shape[0]


def ignorant_find_batch_size(data: Any) -> int | None:
    """:func:`find_batch_size`, or ``None`` where it would raise ``ValueError``/``TypeError``."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError):
        return None


def find_device(data: Any) -> torch.device | None:
    """Device of the first tensor found (depth-first) in ``data``, else ``None``."""
    if isinstance(data, _Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = data.values()
    elif not isinstance(data, (tuple, list)):
        return None
    for obj in data:
        device = find_device(obj)
        if device is not None:
            return device
    return None


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """Concatenate a list of same-shaped nested structures leaf by leaf along ``dim``.

    A list of one element is returned as that element, whatever it is.
    """
    if len(data) == 1:
        return data[0]
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(first, (concatenate([d[i] for d in data], dim=dim)
                                  for i in range(len(first))))
    if isinstance(first, Mapping):
        return _rebuild_mapping(first, {k: concatenate([d[k] for d in data], dim=dim)
                                        for k in first.keys()})
    if not isinstance(first, _Tensor):
        raise TypeError(f"Can only concatenate tensors, but got a {type(first).__name__}; "
                        "remove non-tensor values before concatenating batches.")
    return torch.cat(data, dim=dim)


def slice_tensors(data: Any, tensor_slice: Any, process_index: int | None = None,
                  num_processes: int | None = None) -> Any:
    """``data`` with each tensor indexed by ``tensor_slice``.

    ``process_index``/``num_processes`` are accepted for Accelerate compatibility (they
    only matter on XLA there) and ignored.
    """
    return recursively_apply(lambda t: t[tensor_slice], data)


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Pad each tensor along ``dim`` to the next multiple of ``num_processes``.

    ``batch_size`` is the current size along ``dim``. The padding repeats the last
    item (so padded rows are valid inputs; their outputs are meant to be dropped).
    A size that already divides evenly is returned unchanged.
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}.")
    target = -(-batch_size // num_processes) * num_processes

    def _pad(t: torch.Tensor) -> torch.Tensor:
        size = t.shape[dim]
        if size >= target:
            return t
        if size == 0:
            shape = list(t.shape)
            shape[dim] = target
            return t.new_zeros(shape)
        last = t.narrow(dim, size - 1, 1)
        repeats = [1] * t.dim()
        repeats[dim] = target - size
        return torch.cat([t, last.repeat(*repeats)], dim=dim)

    return recursively_apply(_pad, tensor, error_on_other_type=True)


def _is_half_tensor(tensor: Any) -> bool:
    return (isinstance(tensor, _Tensor) or hasattr(tensor, "dtype")) and tensor.dtype in (
        torch.float16, torch.bfloat16)


def convert_to_fp32(tensor: Any) -> Any:
    """Upcast every fp16/bf16 tensor in a nested structure to fp32; leave the rest alone."""
    return recursively_apply(lambda t: t.float(), tensor, test_type=_is_half_tensor)


class ConvertOutputsToFp32:
    """A forward that returns fp32 outputs; the original is kept as ``model_forward``.

    A class rather than a closure so a model holding it can still be pickled;
    ``__wrapped__`` points at the original so unwrapping code can find it.
    """

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> ConvertOutputsToFp32:
    """Wrap ``model_forward`` so its fp16/bf16 outputs come back as fp32."""
    return ConvertOutputsToFp32(model_forward)


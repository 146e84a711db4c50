"""Split a state dict into tensors (for safetensors) and a JSON skeleton, and back.

A state dict is a tree of dicts, lists and tuples whose leaves are tensors and plain
values (optimizer states key parameters by ``int``, schedulers hold tuples, ...). Pickle
would keep all of that but loading a pickle runs arbitrary code, so accel stores the
tensors in safetensors under path-like keys and the rest as JSON where each tensor leaf
is ``{"__tensor__": key}``. Values JSON cannot hold losslessly (non-string keys, tuples,
dtypes) get small tagged objects; anything else is refused with the path of the value.
"""

from __future__ import annotations

from typing import Any

import torch

from accel_checkpoint.errors import CheckpointError

__all__ = ["flatten_state", "unflatten_state", "is_flat_tensor_dict"]

_TENSOR, _TUPLE, _ITEMS, _DTYPE = "__tensor__", "__tuple__", "__items__", "__dtype__"
_TAGS = frozenset({_TENSOR, _TUPLE, _ITEMS, _DTYPE})


def is_flat_tensor_dict(state: Any) -> bool:
    """A ``{str: Tensor}`` mapping (a model's state dict): stored as safetensors alone."""
    return (isinstance(state, dict) and bool(state)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()))


def flatten_state(state: Any, *, copy: bool = False) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(skeleton, tensors)`` of ``state``; ``copy`` clones tensors to CPU (async saves).

    A flat ``{str: Tensor}`` dict keeps its keys, so a model's file is a plain weights
    file. Nested tensors get ``/``-joined paths (``state/0/exp_avg``).
    """
    tensors: dict[str, torch.Tensor] = {}

    def leaf(tensor: torch.Tensor, path: str) -> dict[str, str]:
        key = path or "tensor"
        if key in tensors:  # two paths that join to the same text, e.g. "a/b" and ("a","b")
            n = 1
            while f"{key}#{n}" in tensors:
                n += 1
            key = f"{key}#{n}"
        tensor = tensor.detach()
        if copy:
            tensor = tensor.to("cpu", copy=True)
        tensors[key] = tensor
        return {_TENSOR: key}

    if is_flat_tensor_dict(state):
        return {k: leaf(v, k) for k, v in state.items()}, tensors
    return _encode(state, "", leaf), tensors


def _join(path: str, key: Any) -> str:
    return f"{path}/{key}" if path else str(key)


def _encode(value: Any, path: str, leaf: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return leaf(value, path)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in value):
            return {k: _encode(v, _join(path, k), leaf) for k, v in value.items()}
        return {_ITEMS: [[_encode(k, _join(path, "key"), leaf), _encode(v, _join(path, k), leaf)]
                         for k, v in value.items()]}
    if isinstance(value, list):
        return [_encode(v, _join(path, i), leaf) for i, v in enumerate(value)]
    if isinstance(value, tuple):  # includes torch.Size and named tuples (stored as tuples)
        return {_TUPLE: [_encode(v, _join(path, i), leaf) for i, v in enumerate(value)]}
    if isinstance(value, torch.dtype):
        return {_DTYPE: str(value).removeprefix("torch.")}
    numpy_value = _from_numpy(value)
    if numpy_value is not None:
        return _encode(numpy_value, path, leaf)
    raise CheckpointError(
        f"Cannot store the {type(value).__module__}.{type(value).__qualname__} at "
        f"{path or '<root>'!r} without pickle. accel checkpoints hold tensors and plain data "
        "(dict, list, tuple, str, int, float, bool, None): make state_dict() return those.")


def _from_numpy(value: Any) -> Any:
    """NumPy arrays become tensors and NumPy scalars Python scalars; else ``None``."""
    module = type(value).__module__
    if not module.startswith("numpy"):
        return None
    if hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
        return torch.from_numpy(value)
    item = getattr(value, "item", None)
    return item() if callable(item) else None


def unflatten_state(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten_state`: rebuild the tree around the loaded tensors."""
    if isinstance(skeleton, list):
        return [unflatten_state(v, tensors) for v in skeleton]
    if not isinstance(skeleton, dict):
        return skeleton
    if len(skeleton) == 1:
        (tag, payload), = skeleton.items()
        if tag == _TENSOR:
            try:
                return tensors[payload]
            except KeyError:
                raise CheckpointError(f"The tensor {payload!r} is missing from the "
                                      "checkpoint's safetensors file.") from None
        if tag == _TUPLE:
            return tuple(unflatten_state(v, tensors) for v in payload)
        if tag == _ITEMS:
            return {_hashable(unflatten_state(k, tensors)): unflatten_state(v, tensors)
                    for k, v in payload}
        if tag == _DTYPE:
            return getattr(torch, payload)
    return {k: unflatten_state(v, tensors) for k, v in skeleton.items()}


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key

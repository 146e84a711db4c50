"""``fallback_allocate``: the first block down the module tree that fits a size limit
(Accelerate's name, contract and search order, ``accelerate.utils.modeling``).

Accelerate's ``infer_auto_device_map`` calls it when the next block in line does not fit on
a device, to put something smaller there instead; accel's planner
(:mod:`accel_inference._placement`) decides its own way, and this is the helper for code that
builds placements on Accelerate's steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference.sizing import parse_memory
from accel_inference.tied import get_module_size_with_ties

__all__ = ["fallback_allocate"]

Named = tuple[str, Any]


def _inside(name: str, tensor: str) -> bool:
    return tensor == name or tensor.startswith(name + ".")


def _parts(module: Any) -> list[Named]:
    """A block's direct tensors, then its child modules (a tensor has none)."""
    if isinstance(module, torch.Tensor):
        return []
    return [*module.named_parameters(recurse=False), *module.named_children()]


def _size_with_ties(name: str, module_sizes: dict[str, int], tied: Sequence[Sequence[str]],
                    queue: list[Named]) -> int:
    partners = [t for group in tied if any(_inside(name, t) for t in group)
                and not all(_inside(name, t) for t in group)
                for t in group if not _inside(name, t)]
    return get_module_size_with_ties(partners, module_sizes[name], module_sizes, queue)[0]


def fallback_allocate(modules: list[Named], module_sizes: dict[str, int], size_limit: int | str,
                      no_split_module_classes: Sequence[str] | None = None,
                      tied_parameters: Sequence[Sequence[str]] | None = None,
                      ) -> tuple[str | None, nn.Module | torch.Tensor | None, list[Named]]:
    """``(name, block, remaining)``: the first block of ``modules`` (a list of
    ``(name, module)``), or of their parts (a too-large block is replaced, in place, by its
    own tensors then its children, as Accelerate searches), whose size with its tied partners
    is at most ``size_limit`` (bytes, or a string such as ``"2MB"``); ``remaining`` is
    ``modules`` with the block's ancestors replaced by their other parts. Classes named in
    ``no_split_module_classes`` are never split. Nothing fits (or the limit does not
    parse): ``(None, None, modules)``."""
    try:
        limit = parse_memory(size_limit)
    except ConfigurationError:
        return None, None, modules
    no_split = set(no_split_module_classes or ())
    tied = tied_parameters or []
    queue = list(modules)
    found = None
    while queue:
        name, module = queue.pop(0)
        if _size_with_ties(name, module_sizes, tied, queue) <= limit:
            found = name
            break
        parts = _parts(module)
        if parts and type(module).__name__ not in no_split:
            queue = [(f"{name}.{n}", v) for n, v in parts] + queue
    if found is None:
        return None, None, modules
    remaining = list(modules)
    for cut in (i for i, char in enumerate(found) if char == "."):
        parent = found[:cut]  # open each ancestor in the list into its parts
        index = next((i for i, (n, _) in enumerate(remaining) if n == parent), None)
        if index is not None:
            parts = [(f"{parent}.{n}", v) for n, v in _parts(remaining[index][1])]
            remaining[index:index + 1] = parts
    index = next(i for i, (n, _) in enumerate(remaining) if n == found)
    name, block = remaining.pop(index)
    return name, block, remaining

"""Device maps: which device each block of a model lives on ("auto" placement included).

A device map is ``{module or tensor name: device}`` with devices as GPU indices, ``"mps"``,
``"cpu"`` (offloaded to RAM when GPUs execute) or ``"disk"``. ``infer_auto_device_map``
fills GPUs in order, then the CPU, then the disk, never splitting a module whose class is
in ``no_split_module_classes`` and keeping tied parameters on one device.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference.sizing import (
    compute_module_sizes,
    get_max_layer_size,
    get_max_memory,
    normalize_device,
    top_level_items,
)
from accel_inference.tied import find_tied_parameters

__all__ = ["infer_auto_device_map", "check_device_map", "clean_device_map",
           "validate_device_map"]

logger = logging.getLogger("accel.big_modeling")


def _is_prefix(prefix: str, name: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _tied_partners(name: str, tied_groups: list[list[str]]) -> set[str]:
    """Tensor names tied to a tensor inside ``name`` but living outside it."""
    partners: set[str] = set()
    for group in tied_groups:
        inside = [n for n in group if _is_prefix(name, n)]
        if inside:
            partners.update(n for n in group if not _is_prefix(name, n))
    return partners


def _splittable(name: str, module: Any, no_split: set[str]) -> list[tuple[str, Any]] | None:
    """The parts of a queued block (full names), or None when it must stay whole."""
    if not isinstance(module, nn.Module) or type(module).__name__ in no_split or \
            next(module.children(), None) is None:
        return None
    return top_level_items(module, name)


def infer_auto_device_map(model: nn.Module, max_memory: Mapping[Any, Any] | None = None,
                          no_split_module_classes: Sequence[str] | None = None,
                          dtype: Any = None, special_dtypes: Mapping[str, Any] | None = None,
                          verbose: bool = False, clean_result: bool = True,
                          offload_buffers: bool = False,
                          fallback_allocation: bool = False) -> dict[str, int | str]:
    """Place ``model``'s blocks greedily: GPUs in order, then CPU, then disk.

    On the execution devices (the first GPU, and the CPU) room for the largest unsplittable
    layer is kept free: offloaded layers are brought there one at a time to run. A block
    that does not fit is split into its children unless its class is in
    ``no_split_module_classes``; tied tensors are placed with the block that holds their
    first name. ``fallback_allocation`` puts at least one fitting block on a device that
    would otherwise stay empty. ``offload_buffers=False`` (the default) keeps the buffers of
    offloaded blocks on the execution device, so their size is reserved there.
    """
    memory = get_max_memory(max_memory)
    devices: list[int | str] = [*memory, *([] if "disk" in memory else ["disk"])]
    no_split = set([no_split_module_classes] if isinstance(no_split_module_classes, str)
                   else no_split_module_classes or ())
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    buffer_sizes = compute_module_sizes(model, dtype=dtype, buffers_only=True)
    tied_groups = find_tied_parameters(model)
    queue = top_level_items(model)
    gpus = [d for d in devices if isinstance(d, int)]
    main_devices = {gpus[0], "cpu"} if gpus else {"cpu"}
    offload_devices = {"cpu", "disk"} if gpus else {"disk"}
    max_layer, _ = get_max_layer_size(queue, sizes, sorted(no_split))
    device_map: dict[str, int | str] = {}
    index, used, placed_here = 0, 0, 0
    while queue:
        name, module = queue.pop(0)
        device = devices[index]
        capacity = float("inf") if device == "disk" else memory[device]
        if device in main_devices and index < len(devices) - 1:
            capacity -= max_layer
        partners = _tied_partners(name, tied_groups) - {n for n in device_map}
        partner_items = [(n, m) for n, m in queue if any(_is_prefix(n, p) for p in partners)]
        size = sizes.get(name, 0) + sum(sizes.get(n, 0) for n, _ in partner_items)
        if not offload_buffers and device in offload_devices:
            size -= buffer_sizes.get(name, 0)
        if used + size <= capacity:
            for item_name, _ in [(name, module), *partner_items]:
                device_map[item_name] = device
            queue = [item for item in queue if item not in partner_items]
            used += size
            placed_here += 1
            if verbose:
                print(f"Putting {name} ({size} bytes) on {device}.")
            continue
        children = _splittable(name, module, no_split)
        if children:
            queue = children + queue
            continue
        if fallback_allocation and placed_here == 0 and device != "disk":
            fit = _first_fitting(queue, sizes, capacity - used, no_split)
            if fit is not None:
                queue = _without(queue, fit[0], no_split) if fit[1] else queue
                device_map[fit[0]] = device
                used += sizes.get(fit[0], 0)
                placed_here += 1
                queue.insert(0, (name, module))
                queue = _expand_parents(queue, set(device_map), no_split)
                continue
        queue.insert(0, (name, module))
        index, used, placed_here = index + 1, 0, 0
    return clean_device_map(device_map) if clean_result else device_map


def _first_fitting(queue: list[tuple[str, Any]], sizes: Mapping[str, int], room: float,
                   no_split: set[str]) -> tuple[str, bool] | None:
    """First unsplittable unit (depth-first over the queue) that fits in ``room``."""
    todo = list(queue)
    while todo:
        name, module = todo.pop(0)
        children = _splittable(name, module, no_split)
        if children is None:
            if sizes.get(name, 0) <= room:
                return name, True
        else:
            todo = children + todo
    return None


def _without(queue: list[tuple[str, Any]], placed: str,
             no_split: set[str]) -> list[tuple[str, Any]]:
    return [item for item in queue if item[0] != placed]


def _expand_parents(queue: list[tuple[str, Any]], placed: set[str],
                    no_split: set[str]) -> list[tuple[str, Any]]:
    """Split queued modules that contain an already placed unit, so it is not placed twice."""
    out: list[tuple[str, Any]] = []
    todo = list(queue)
    while todo:
        name, module = todo.pop(0)
        inner = [p for p in placed if p != name and _is_prefix(name, p)]
        if not inner:
            out.append((name, module))
            continue
        children = _splittable(name, module, no_split) or []
        todo = [c for c in children if c[0] not in placed] + todo
    return out


def clean_device_map(device_map: dict[str, Any], module_name: str = "") -> dict[str, Any]:
    """Merge entries: a module whose every mapped part is on one device becomes one entry."""
    order = list(device_map)
    merged = dict(device_map)
    prefixes = sorted({".".join(k.split(".")[:i]) for k in order for i in range(len(k.split(".")))},
                      key=lambda p: (p.count("."), p) if p else (-1, p))
    for prefix in prefixes:
        if not _is_prefix(module_name, prefix):
            continue
        inside = [k for k in merged if _is_prefix(prefix, k) and k != prefix]
        values = {str(merged[k]) for k in inside}
        if len(inside) > 1 and len(values) == 1:
            device = merged[inside[0]]
            position = min(order.index(k) if k in order else len(order) for k in inside)
            for k in inside:
                del merged[k]
            merged[prefix] = device
            order.insert(position, prefix)
    return {k: merged[k] for k in dict.fromkeys(order) if k in merged}


def validate_device_map(device_map: Mapping[str, Any]) -> dict[str, int | str]:
    """Device names checked and normalised; an unknown device is an error naming it."""
    out: dict[str, int | str] = {}
    for name, device in device_map.items():
        try:
            out[name] = normalize_device(device)
        except ConfigurationError:
            raise ConfigurationError(f"device_map[{name!r}] = {device!r} is not a device: use "
                                     "a GPU index (0, 1, ...), 'cuda:N', 'mps', 'cpu' or "
                                     "'disk'.") from None
    return out


def check_device_map(model: nn.Module, device_map: Mapping[str, Any]) -> None:
    """Every parameter and persistent buffer must be covered by an entry; every entry must
    name a module or tensor of ``model``."""
    validate_device_map(device_map)
    known = {n for n, _ in model.named_modules()} | set(model.state_dict()) | \
        {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    unknown = [k for k in device_map if k not in known]
    if unknown:
        raise ConfigurationError(f"device_map names {unknown} that are not modules or tensors "
                                 f"of {type(model).__name__}: check the names against "
                                 "model.named_modules().")
    # non-persistent buffers are not in checkpoints: unmapped, they stay where they are
    tensors = list(dict.fromkeys([*(n for n, _ in model.named_parameters()), *model.state_dict()]))
    left = [n for n in tensors if not any(_is_prefix(k, n) for k in device_map)]
    if left:
        modules = list(dict.fromkeys(n.rpartition(".")[0] or n for n in left))
        raise ConfigurationError(f"The device_map gives no device to the modules {modules} "
                                 f"(tensors {left[:10]}): add entries for them, or use "
                                 "device_map='auto'.")



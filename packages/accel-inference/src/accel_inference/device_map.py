"""Device maps: which device each block of a model lives on ("auto" placement included).

A device map is ``{module or tensor name: device}`` with devices as GPU indices, ``"mps"``,
``"cpu"`` (offloaded to RAM when GPUs execute) or ``"disk"``. ``infer_auto_device_map``
fills GPUs in order, then the CPU, then the disk, never splitting a module whose class is
in ``no_split_module_classes`` and keeping tied parameters on one device; its placements
are Accelerate's, so ``device_map="auto"`` loads land where they would with Accelerate.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference._placement import Planner
from accel_inference.sizing import (
    compute_module_sizes,
    get_max_memory,
    normalize_device,
    top_level_items,
)
from accel_inference.tensors import holds
from accel_inference.tied import check_tied_parameters_in_config, find_tied_parameters

__all__ = ["infer_auto_device_map", "check_device_map", "clean_device_map",
           "validate_device_map"]

logger = logging.getLogger("accel.big_modeling")


def infer_auto_device_map(model: nn.Module, max_memory: Mapping[Any, Any] | None = None,
                          no_split_module_classes: Sequence[str] | None = None,
                          dtype: Any = None, special_dtypes: Mapping[str, Any] | None = None,
                          verbose: bool = False, clean_result: bool = True,
                          offload_buffers: bool = False,
                          fallback_allocation: bool = False) -> dict[str, int | str]:
    """Place ``model``'s blocks greedily: GPUs in order, then CPU, then disk.

    Placements are Accelerate's (see ``accel_inference._placement`` for the rules): the
    first GPU and the CPU keep room for the largest layer still to place, a block that does
    not fit is split unless its class is in ``no_split_module_classes``, tied blocks go
    together, and ``fallback_allocation`` gives a device that would stay empty the first
    block that fits there. With ``offload_buffers=False`` the buffers of offloaded blocks
    run on the GPU: a warning says when they fit no GPU's remaining memory. Devices left
    empty are logged (INFO) with the memory they would have needed.
    """
    memory = get_max_memory(max_memory)
    devices: list[int | str] = [*memory, *([] if "disk" in memory else ["disk"])]
    gpus = [d for d in devices if d not in ("cpu", "disk")]
    main_devices: set[int | str] = {"mps"} if "mps" in gpus else \
        ({gpus[0], "cpu"} if gpus else {"cpu"})
    no_split = set([no_split_module_classes] if isinstance(no_split_module_classes, str)
                   else no_split_module_classes or ())
    tied_groups = find_tied_parameters(model)
    if not tied_groups and check_tied_parameters_in_config(model):
        logger.warning("%s declares tied weights but none are tied: call model.tie_weights() "
                       "before infer_auto_device_map.", type(model).__name__)
    planner = Planner(
        memory=memory, devices=devices, main_devices=main_devices,
        sizes=compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes),
        buffer_sizes=compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes,
                                          buffers_only=True),
        tied_groups=tied_groups, no_split=no_split, queue=top_level_items(model),
        offload_buffers=offload_buffers, fallback_allocation=fallback_allocation,
        verbose=verbose)
    device_map = planner.run()
    if clean_result:
        device_map = clean_device_map(device_map)
    offloaded_buffers = planner.buffers.get("cpu", 0) + planner.buffers.get("disk", 0)
    if gpus and offloaded_buffers and not any(
            memory[d] >= offloaded_buffers + planner.used.get(d, 0) for d in gpus):
        warnings.warn(f"The blocks offloaded to the CPU or disk hold {offloaded_buffers} bytes "
                      "of buffers, which run on the GPU and fit no GPU's remaining memory: "
                      "this may run out of memory. Pass offload_buffers=True to keep them "
                      "offloaded too.", stacklevel=2)
    if planner.needed:
        lines = "; ".join(f"{d}: {n} bytes" for d, n in planner.needed.items())
        logger.info("infer_auto_device_map placed nothing on some devices for insufficient "
                    "memory (the first block refused there needed %s). Raise their "
                    "max_memory to at least that, or split the model finer.", lines)
    return device_map


def clean_device_map(device_map: dict[str, Any], module_name: str = "") -> dict[str, Any]:
    """Merge entries: a module whose every mapped part is on one device becomes one entry.

    Works in place (and returns the map), as Accelerate's does; merged entries keep the
    position of their first part, so the map stays in module order.
    """
    merged = dict(device_map)
    position = {k: i for i, k in enumerate(merged)}
    todo = [module_name]
    while todo:
        prefix = todo.pop(0)
        inside = [k for k in merged if k != prefix and holds(prefix, k)]
        if not inside:
            continue
        first = merged[inside[0]]
        if all(merged[k] == first for k in inside):
            position[prefix] = min(position[k] for k in inside)
            for k in inside:
                del merged[k]
            merged[prefix] = first
            continue
        depth = prefix.count(".") + 1 if prefix else 0
        todo.extend(dict.fromkeys(".".join(k.split(".")[:depth + 1]) for k in inside))
    result = {k: merged[k] for k in sorted(merged, key=position.__getitem__)}
    device_map.clear()
    device_map.update(result)
    return device_map


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
    """Accelerate's check: a key naming no submodule warns (a tensor name too, as in
    Accelerate); a state-dict tensor no key covers is a ``ValueError`` listing them."""
    modules = {n for n, _ in model.named_modules()}
    unknown = [k for k in device_map if k != "" and k not in modules]
    if unknown:
        warnings.warn("The following device_map keys do not match any submodules in the "
                      f"model: {unknown}", UserWarning, stacklevel=2)
    _check_coverage(model, device_map)


def _check_coverage(model: nn.Module, device_map: Mapping[str, Any]) -> None:
    """Every state-dict tensor needs a key: non-persistent buffers are not in checkpoints,
    and stay where they are when unmapped."""
    left = [n for n in model.state_dict() if not any(holds(k, n) for k in device_map)]
    if left:
        raise ConfigurationError("The device_map provided does not give any device for the "
                                 f"following parameters: {', '.join(left)}. Add entries for "
                                 "their modules, or use device_map='auto'.")

"""Attach ``AlignDevicesHook``s over a module tree (whole model, offloaded blocks, device maps).

Accelerate's recursive helpers: ``dispatch_model``, ``cpu_offload`` and ``disk_offload`` are
built on them, and transformers/diffusers call them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from accel_inference.hooks import AlignDevicesHook, add_hook_to_module, remove_hook_from_module
from accel_inference.offload import PrefixedDataset
from accel_inference.tensors import named_module_tensors

__all__ = ["attach_execution_device_hook", "attach_align_device_hook",
           "attach_align_device_hook_on_blocks", "remove_hook_from_submodules"]


def attach_execution_device_hook(module: nn.Module, execution_device: Any,
                                 skip_keys: str | list[str] | None = None,
                                 preload_module_classes: list[str] | None = None,
                                 tied_params_map: dict | None = None) -> None:
    """Recursively make each submodule with weights move its inputs to ``execution_device``."""
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
        add_hook_to_module(module, AlignDevicesHook(execution_device, skip_keys=skip_keys,
                                                    tied_params_map=tied_params_map))
    if preload_module_classes is not None and type(module).__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(child, execution_device, skip_keys,
                                     preload_module_classes, tied_params_map)


def attach_align_device_hook(module: nn.Module, execution_device: Any = None,
                             offload: bool = False, weights_map: Mapping[str, Any] | None = None,
                             offload_buffers: bool = False, module_name: str = "",
                             skip_keys: str | list[str] | None = None,
                             preload_module_classes: list[str] | None = None,
                             tied_params_map: dict | None = None, prefetcher: Any = None) -> None:
    """Recursively add an ``AlignDevicesHook`` to every submodule that has its own weights.

    A module whose class is in ``preload_module_classes`` gets one hook for its whole subtree
    (its weights are all loaded before its forward runs).
    """
    direct = list(named_module_tensors(module))
    whole = offload and preload_module_classes is not None and \
        type(module).__name__ in preload_module_classes
    if direct or whole:
        prefixed = (PrefixedDataset(weights_map, f"{module_name}.") if module_name else
                    weights_map) if weights_map is not None else None
        hook = AlignDevicesHook(execution_device, offload=offload, weights_map=prefixed,
                                offload_buffers=offload_buffers, place_submodules=whole,
                                skip_keys=skip_keys, tied_params_map=tied_params_map,
                                prefetcher=prefetcher if offload else None)
        add_hook_to_module(module, hook, append=True)
    if whole:
        return
    for name, child in module.named_children():
        attach_align_device_hook(child, execution_device, offload, weights_map, offload_buffers,
                                 f"{module_name}.{name}" if module_name else name, skip_keys,
                                 preload_module_classes, tied_params_map, prefetcher)


def attach_align_device_hook_on_blocks(module: nn.Module, execution_device: Any = None,
                                       offload: Any = False,
                                       weights_map: Mapping[str, Any] | None = None,
                                       offload_buffers: bool = False, module_name: str = "",
                                       skip_keys: str | list[str] | None = None,
                                       preload_module_classes: list[str] | None = None,
                                       tied_params_map: dict | None = None,
                                       prefetcher: Any = None) -> None:
    """Hooks per block of a device map: ``execution_device`` and ``offload`` may be dicts
    keyed by module name (what ``dispatch_model`` passes)."""
    common = {"skip_keys": skip_keys, "tied_params_map": tied_params_map}
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if not offload:
            add_hook_to_module(module, AlignDevicesHook(execution_device, io_same_device=True,
                                                        place_submodules=True, **common))
        else:
            attach_align_device_hook(module, execution_device, True, weights_map,
                                     offload_buffers, module_name,
                                     preload_module_classes=preload_module_classes,
                                     prefetcher=prefetcher, **common)
        return
    if not isinstance(execution_device, Mapping):
        execution_device = dict.fromkeys(offload, execution_device)
    if not isinstance(offload, Mapping):
        offload = dict.fromkeys(execution_device, offload)
    if module_name in execution_device and module_name in offload and not offload[module_name]:
        add_hook_to_module(module, AlignDevicesHook(
            execution_device[module_name], offload_buffers=offload_buffers,
            io_same_device=module_name == "", place_submodules=True, **common))
        attach_execution_device_hook(module, execution_device[module_name], skip_keys,
                                     preload_module_classes, tied_params_map)
    elif module_name in execution_device and module_name in offload:
        attach_align_device_hook(module, execution_device[module_name], True, weights_map,
                                 offload_buffers, module_name,
                                 preload_module_classes=preload_module_classes,
                                 prefetcher=prefetcher, **common)
        if not hasattr(module, "_hf_hook"):
            add_hook_to_module(module, AlignDevicesHook(execution_device[module_name],
                                                        io_same_device=module_name == "",
                                                        **common))
        attach_execution_device_hook(module, execution_device[module_name], skip_keys,
                                     preload_module_classes, tied_params_map)
    elif module_name == "":
        add_hook_to_module(module, AlignDevicesHook(execution_device.get(""),
                                                    io_same_device=True, **common))
    for name, child in module.named_children():
        attach_align_device_hook_on_blocks(
            child, execution_device, offload, weights_map, offload_buffers,
            f"{module_name}.{name}" if module_name else name, skip_keys,
            preload_module_classes, tied_params_map, prefetcher)


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Remove the hooks of ``module`` and of every submodule."""
    remove_hook_from_module(module)
    for child in module.children():
        remove_hook_from_submodules(child)

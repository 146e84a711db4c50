"""Forward hooks with Accelerate's names and attributes.

``add_hook_to_module`` wraps ``module.forward`` and stores the hook as ``module._hf_hook``
and the original forward as ``module._old_forward``: transformers, diffusers and peft read
those attributes, so they are part of the contract. Removing the hook restores the module
exactly (a forward that came from the class is not left behind as an instance attribute).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
from accel_state.structures import find_device, send_to_device
from torch import nn

from accel_inference.tensors import (
    clear_device_cache,
    named_module_tensors,
    set_module_tensor_to_device,
)

__all__ = ["ModelHook", "SequentialHook", "add_hook_to_module", "remove_hook_from_module",
           "AlignDevicesHook", "CpuOffload", "UserCpuOffloadHook", "LayerwiseCastingHook"]


class ModelHook:
    """Callbacks around a module's forward; every method is a no-op to override."""

    #: run the wrapped forward under ``torch.no_grad()``
    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is attached; may modify and must return the module."""
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """Called before forward; returns the (possibly changed) arguments."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Called after forward; returns the (possibly changed) output."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; undoes what ``init_hook`` did."""
        return module


class SequentialHook(ModelHook):
    """Several hooks in order (``post_forward`` in the same order as ``pre_forward``)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = list(hooks)

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def _hooked_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    hook = module._hf_hook
    args, kwargs = hook.pre_forward(module, *args, **kwargs)
    if hook.no_grad:
        with torch.no_grad():
            output = module._old_forward(*args, **kwargs)
    else:
        output = module._old_forward(*args, **kwargs)
    return hook.post_forward(module, output)


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Attach ``hook`` to ``module`` (replacing its hook, or chained after it with ``append``)."""
    if append and getattr(module, "_hf_hook", None) is not None:
        old_hook = module._hf_hook
        remove_hook_from_module(module)
        hook = SequentialHook(old_hook, hook)
    if hasattr(module, "_hf_hook") and hasattr(module, "_old_forward"):
        old_forward = module._old_forward  # a hook is being replaced: keep the true original
    else:
        old_forward = module.forward
        module._old_forward = old_forward
        module._hf_forward_was_instance_attr = "forward" in vars(module)
    module = hook.init_hook(module)
    module._hf_hook = hook
    module.forward = functools.update_wrapper(functools.partial(_hooked_forward, module),
                                              old_forward)
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Detach the hook of ``module`` (and of all submodules with ``recurse``)."""
    if hasattr(module, "_hf_hook"):
        module._hf_hook.detach_hook(module)
        del module._hf_hook
    if hasattr(module, "_old_forward"):
        if vars(module).pop("_hf_forward_was_instance_attr", True):
            module.forward = module._old_forward
        else:
            vars(module).pop("forward", None)
        del module._old_forward
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


class AlignDevicesHook(ModelHook):
    """Run a module on ``execution_device``; with ``offload``, keep its weights elsewhere.

    Offloaded weights (``weights_map``: RAM, offload folder, safetensors) are put on the
    execution device just before forward and replaced by ``meta`` tensors right after, so
    only one block's weights occupy the device at a time. ``io_same_device`` returns
    outputs on the device the inputs came from. A ``prefetcher`` (see
    :mod:`accel_inference.prefetch`) loads the next block's weights while this one runs.
    """

    def __init__(self, execution_device: Any = None, offload: bool = False,
                 io_same_device: bool = False, weights_map: Mapping[str, Any] | None = None,
                 offload_buffers: bool = False, place_submodules: bool = False,
                 skip_keys: str | list[str] | None = None,
                 tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None,
                 prefetcher: Any = None) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        self.tied_params_map = tied_params_map
        self.prefetcher = prefetcher
        self.input_device = None
        self.param_original_devices: dict[str, torch.device] = {}
        self.buffer_original_devices: dict[str, torch.device] = {}
        self.tied_pointers_to_remove: set[tuple[int, Any]] = set()

    def __repr__(self) -> str:
        return (f"AlignDevicesHook(execution_device={self.execution_device}, offload="
                f"{self.offload}, io_same_device={self.io_same_device}, offload_buffers="
                f"{self.offload_buffers}, place_submodules={self.place_submodules}, "
                f"skip_keys={self.skip_keys!r})")

    def _offloaded(self, module: nn.Module) -> list[str]:
        return [name for name, _ in named_module_tensors(
            module, include_buffers=self.offload_buffers, recurse=self.place_submodules,
            remove_non_persistent=True)]

    def init_hook(self, module: nn.Module) -> nn.Module:
        if self.execution_device == "meta" or self.execution_device == torch.device("meta"):
            self.tied_params_map = None
        if not self.offload and self.execution_device is not None:
            for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                set_module_tensor_to_device(module, name, self.execution_device,
                                            tied_params_map=self.tied_params_map)
            return module
        if not self.offload:
            return module
        self.original_devices = {name: t.device for name, t in named_module_tensors(
            module, include_buffers=self.offload_buffers, recurse=self.place_submodules)}
        if self.weights_map is None:
            self.weights_map = {name: t.to("cpu") for name, t in named_module_tensors(
                module, include_buffers=self.offload_buffers, recurse=self.place_submodules)}
        for name in self._offloaded(module):
            set_module_tensor_to_device(module, name, "meta")
        if not self.offload_buffers and self.execution_device is not None:
            for name, _ in module.named_buffers(recurse=self.place_submodules):
                set_module_tensor_to_device(module, name, self.execution_device,
                                            tied_params_map=self.tied_params_map)
        return module

    def load_weights(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """This module's offloaded tensors, read and put on the execution device."""
        out = {}
        for name in self._offloaded(module):
            value = self.weights_map[name]
            out[name] = value.to(self.execution_device) if value.device.type != "meta" else value
        return out

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        if self.offload:
            self.tied_pointers_to_remove = set()
            loaded = self.prefetcher.take(self, module) if self.prefetcher is not None else None
            if loaded is None:
                loaded = {name: self.weights_map[name] for name in self._offloaded(module)}
            for name, value in loaded.items():
                if self.tied_params_map is not None and value.device.type != "meta":
                    pointer = value.data_ptr()
                    if pointer in self.tied_params_map and \
                            self.execution_device not in self.tied_params_map[pointer]:
                        self.tied_pointers_to_remove.add((pointer, self.execution_device))
                set_module_tensor_to_device(module, name, self.execution_device, value=value,
                                            tied_params_map=self.tied_params_map)
        if self.execution_device is None:
            return args, kwargs
        return (send_to_device(args, self.execution_device),
                send_to_device(kwargs, self.execution_device, skip_keys=self.skip_keys))

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload:
            for name in self._offloaded(module):
                set_module_tensor_to_device(module, name, "meta")
            for pointer, device in self.tied_pointers_to_remove:
                self.tied_params_map[pointer].pop(device, None)  # type: ignore[index]
            self.tied_pointers_to_remove = set()
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload:
            for name, device in self.original_devices.items():
                if device.type != "meta":
                    set_module_tensor_to_device(module, name, device,
                                                value=self.weights_map.get(name))
        return module


class CpuOffload(ModelHook):
    """Whole-model offload: the model lives on the CPU and moves to ``execution_device`` to
    run, after moving the previous model of a chain (``prev_module_hook``) back out."""

    def __init__(self, execution_device: Any = None,
                 prev_module_hook: UserCpuOffloadHook | None = None) -> None:
        self.prev_module_hook = prev_module_hook
        self.execution_device = execution_device if execution_device is not None else \
            (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
             else torch.device("cpu"))

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
            clear_device_cache()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), \
            send_to_device(kwargs, self.execution_device)


class UserCpuOffloadHook:
    """Handle returned by ``cpu_offload_with_hook``: ``offload()`` moves the model back to
    the CPU now; ``remove()`` takes the hook off."""

    def __init__(self, model: nn.Module, hook: CpuOffload) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        remove_hook_from_module(self.model)


class LayerwiseCastingHook(ModelHook):
    """Store weights in a small ``storage_dtype`` (e.g. float8) and up-cast them to
    ``compute_dtype`` only while the module runs."""

    _SKIP = ("batchnorm", "layernorm", "groupnorm", "rmsnorm")

    def __init__(self, storage_dtype: torch.dtype, compute_dtype: torch.dtype,
                 non_blocking: bool = False) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        module.to(dtype=self.compute_dtype, non_blocking=self.non_blocking)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.compute_dtype, non_blocking=self.non_blocking)

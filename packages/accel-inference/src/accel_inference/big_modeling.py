"""Run models larger than one device: dispatch over devices, CPU and disk offload.

``load_checkpoint_and_dispatch`` is the usual entry point: build the model under
``init_empty_weights``, then load and place it by a device map ("auto" computes one).
Offloaded blocks are streamed to the execution device by ``AlignDevicesHook``s; unlike
Accelerate, the next block's weights are read on a background thread while the current
block runs (``prefetch=True``, see :mod:`accel_inference.prefetch`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference.attach import attach_align_device_hook, attach_align_device_hook_on_blocks
from accel_inference.device_map import (
    check_device_map,
    infer_auto_device_map,
    validate_device_map,
)
from accel_inference.hooks import (
    AlignDevicesHook,
    CpuOffload,
    UserCpuOffloadHook,
    add_hook_to_module,
)
from accel_inference.loading import load_checkpoint_in_model
from accel_inference.offload import (
    INDEX_NAME,
    OffloadedWeightsLoader,
    extract_submodules_state_dict,
    offload_state_dict,
)
from accel_inference.prefetch import Prefetcher
from accel_inference.sizing import get_balanced_memory
from accel_inference.tensors import get_module_and_name
from accel_inference.tied import find_tied_parameters, retie_parameters

__all__ = ["cpu_offload", "cpu_offload_with_hook", "disk_offload", "dispatch_model",
           "load_checkpoint_and_dispatch", "DEVICE_MAP_STRATEGIES"]

logger = logging.getLogger("accel.big_modeling")

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _first_device(model: nn.Module) -> torch.device:
    param = next(iter(model.parameters()), None)
    return param.device if param is not None else torch.device("cpu")


def cpu_offload(model: nn.Module, execution_device: Any = None, offload_buffers: bool = False,
                state_dict: Mapping[str, torch.Tensor] | None = None,
                preload_module_classes: list[str] | None = None,
                prefetch: bool = False) -> nn.Module:
    """Keep all weights in CPU RAM; each submodule's weights visit ``execution_device``
    only while it runs. ``prefetch`` copies the next block ahead on a worker thread."""
    if state_dict is None:
        state_dict = {n: t.to("cpu") for n, t in model.state_dict().items()}
    return _offload(model, state_dict, execution_device, offload_buffers,
                    preload_module_classes, prefetch)


def cpu_offload_with_hook(model: nn.Module, execution_device: Any = None,
                          prev_module_hook: UserCpuOffloadHook | None = None
                          ) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Whole-model offload for pipelines of models run in turn (diffusers): the model moves
    to ``execution_device`` when called, after ``prev_module_hook``'s model moved out."""
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)


def disk_offload(model: nn.Module, offload_dir: str | os.PathLike[str],
                 execution_device: Any = None, offload_buffers: bool = False,
                 preload_module_classes: list[str] | None = None,
                 prefetch: bool = True) -> nn.Module:
    """Keep all weights in memory-mapped files under ``offload_dir`` (written if it has no
    ``index.json``); each block is read to ``execution_device`` when it runs, the next one
    ahead on a worker thread unless ``prefetch=False``."""
    if not os.path.isfile(os.path.join(offload_dir, INDEX_NAME)):
        offload_state_dict(offload_dir, model.state_dict())
    return _offload(model, OffloadedWeightsLoader(save_folder=offload_dir), execution_device,
                    offload_buffers, preload_module_classes, prefetch)


def _offload(model: nn.Module, weights_map: Any, execution_device: Any, offload_buffers: bool,
             preload_module_classes: list[str] | None, prefetch: bool) -> nn.Module:
    """The hooks both offloads install: outputs back on the input's device, and each
    submodule's weights read from ``weights_map`` to ``execution_device`` while it runs."""
    execution_device = execution_device if execution_device is not None else _first_device(model)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(model, execution_device, offload=True,
                             offload_buffers=offload_buffers, weights_map=weights_map,
                             preload_module_classes=preload_module_classes,
                             prefetcher=Prefetcher() if prefetch else None)
    return model


def _execution(device: Any) -> Any:
    return torch.device("cuda", device) if isinstance(device, int) and \
        torch.cuda.is_available() else device


def dispatch_model(model: nn.Module, device_map: Mapping[str, Any],
                   main_device: Any = None,
                   state_dict: Mapping[str, torch.Tensor] | None = None,
                   offload_dir: str | os.PathLike[str] | None = None,
                   offload_index: Mapping[str, Any] | None = None,
                   offload_buffers: bool = False, skip_keys: Any = None,
                   preload_module_classes: list[str] | None = None,
                   force_hooks: bool = False, prefetch: bool = True) -> nn.Module:
    """Place each block of ``model`` per ``device_map`` and hook it to run there.

    Blocks on ``"cpu"`` (when a GPU is the main device) or ``"disk"`` are offloaded and run
    on the main device; ``offload_dir`` holds (or receives) the disk weights. A map with one
    device just moves the model (no hooks) unless ``force_hooks``; one with every block on
    ``"disk"`` runs on the CPU from the offloaded weights. Sets
    ``model.hf_device_map``.
    """
    device_map = validate_device_map(device_map)
    check_device_map(model, device_map)
    devices = set(device_map.values())
    if len(devices) == 1 and not force_hooks and devices != {"disk"}:  # all on disk: hooks
        (device,) = devices
        model.to(_execution(device))
        model.hf_device_map = dict(device_map)
        return model
    if main_device is None:
        main_device = next((d for d in device_map.values() if d not in ("cpu", "disk")), "cpu")
    main_device = _execution(main_device)
    if main_device != "cpu":
        cpu_modules = [n for n, d in device_map.items() if d == "cpu"]
        if state_dict is None and cpu_modules:
            state_dict = extract_submodules_state_dict(model.state_dict(), cpu_modules)
    disk_modules = [n for n, d in device_map.items() if d == "disk"]
    if disk_modules and offload_dir is None and offload_index is None:
        raise ConfigurationError(f"The device_map puts {disk_modules[:5]} on 'disk': pass "
                                 "offload_dir= (where their weights are or will be written).")
    if disk_modules and offload_index is None and \
            not os.path.isfile(os.path.join(offload_dir, INDEX_NAME)):
        offload_state_dict(offload_dir, extract_submodules_state_dict(model.state_dict(),
                                                                      disk_modules))
    execution = {n: main_device if d in ("cpu", "disk") else _execution(d)
                 for n, d in device_map.items()}
    execution[""] = main_device
    offloaded = ("disk",) if str(main_device) in ("cpu", "mps") else ("cpu", "disk")
    offload = {n: d in offloaded for n, d in device_map.items()}
    folder = offload_dir if disk_modules else None
    weights_map = None
    if state_dict is not None or folder is not None or offload_index is not None:
        weights_map = OffloadedWeightsLoader(
            state_dict=state_dict, save_folder=folder, index=offload_index,
            device=main_device if offload_index is not None else None)
    tied = find_tied_parameters(model)
    tied_map: dict[int, dict[Any, torch.Tensor]] = {}
    for group in tied:
        for name in group:
            param = getattr(*get_module_and_name(model, name))
            if param.device.type != "meta":
                tied_map[param.data_ptr()] = {}
    attach_align_device_hook_on_blocks(
        model, execution_device=execution, offload=offload, offload_buffers=offload_buffers,
        weights_map=weights_map, skip_keys=skip_keys,
        preload_module_classes=preload_module_classes, tied_params_map=tied_map,
        prefetcher=Prefetcher() if prefetch and any(offload.values()) else None)
    retie_parameters(model, tied)
    model.hf_device_map = dict(device_map)
    return model


def _resolve_device_map(model: nn.Module, device_map: Any, max_memory: Any,
                        no_split_module_classes: Sequence[str] | None, dtype: Any,
                        offload_buffers: bool) -> Any:
    if not isinstance(device_map, str):
        return device_map
    if device_map not in DEVICE_MAP_STRATEGIES:
        raise ConfigurationError(f"device_map={device_map!r} is not a strategy: use one of "
                                 f"{', '.join(map(repr, DEVICE_MAP_STRATEGIES))} or a dict.")
    if device_map != "sequential":
        max_memory = get_balanced_memory(model, max_memory, no_split_module_classes, dtype,
                                         low_zero=device_map == "balanced_low_0")
    return infer_auto_device_map(model, max_memory, no_split_module_classes, dtype,
                                 offload_buffers=offload_buffers)


def load_checkpoint_and_dispatch(model: nn.Module, checkpoint: str | os.PathLike[str],
                                 device_map: Any = None, max_memory: Any = None,
                                 no_split_module_classes: Sequence[str] | None = None,
                                 offload_folder: str | os.PathLike[str] | None = None,
                                 offload_buffers: bool = False, dtype: Any = None,
                                 offload_state_dict: bool | None = None,
                                 skip_keys: Any = None,
                                 preload_module_classes: list[str] | None = None,
                                 force_hooks: bool = False, strict: bool = False,
                                 full_state_dict: bool = True,
                                 broadcast_from_rank0: bool = False,
                                 prefetch: bool = True) -> nn.Module:
    """Load ``checkpoint`` into ``model`` (typically empty) and dispatch it.

    ``device_map``: None (load on the CPU, no hooks), a dict, or "auto" / "balanced" /
    "balanced_low_0" (spread over the GPUs) / "sequential" (fill GPU 0 first), within
    ``max_memory`` and without splitting ``no_split_module_classes``.
    """
    device_map = _resolve_device_map(model, device_map, max_memory, no_split_module_classes,
                                     dtype, offload_buffers)
    if offload_state_dict is None:
        offload_state_dict = device_map is not None and "disk" in dict(device_map).values()
    load_checkpoint_in_model(model, checkpoint, device_map=device_map,
                             offload_folder=offload_folder, dtype=dtype,
                             offload_state_dict=offload_state_dict,
                             offload_buffers=offload_buffers, strict=strict,
                             full_state_dict=full_state_dict,
                             broadcast_from_rank0=broadcast_from_rank0)
    if device_map is None:
        return model
    return dispatch_model(model, device_map=device_map, offload_dir=offload_folder,
                          offload_buffers=offload_buffers, skip_keys=skip_keys,
                          preload_module_classes=preload_module_classes,
                          force_hooks=force_hooks, prefetch=prefetch)

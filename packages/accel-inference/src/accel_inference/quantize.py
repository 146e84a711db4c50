"""Quantise a model's ``nn.Linear`` layers with bitsandbytes (Accelerate's
``load_and_quantize_model``): 8-bit LLM.int8() or 4-bit fp4/nf4 weights.

bitsandbytes is an optional extra (``pip install "accel[bnb]"``), imported only when a model is
quantised. Layers are swapped on the meta device, then filled: from the model's own weights,
or from a checkpoint loaded tensor by tensor per a device map. bitsandbytes quantises a layer
when its weight moves to its execution device: a GPU, or the CPU when no GPU executes
(bitsandbytes >= 0.46 has CPU kernels; Accelerate requires a GPU there).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from accel_state.errors import ConfigurationError, MissingDependencyError
from accel_state.imports import is_bnb_available, is_package_available
from torch import nn

from accel_inference.device_map import validate_device_map
from accel_inference.empty_init import init_empty_weights
from accel_inference.quantize_config import BnbQuantizationConfig
from accel_inference.tensors import set_module_tensor_to_device
from accel_inference.tied import device_of, find_tied_parameters, retie_parameters

__all__ = ["BnbQuantizationConfig", "load_and_quantize_model", "has_4bit_bnb_layers",
           "replace_with_bnb_layers", "get_keys_to_not_convert", "get_parameter_device",
           "get_quantized_model_device_map", "quantize_and_offload_8bit"]

logger = logging.getLogger("accel.big_modeling")
_AUTO_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_MIN_VERSION = {"8-bit": "0.37.2", "4-bit": "0.39.0"}


def _import_bnb(config: BnbQuantizationConfig) -> Any:
    """bitsandbytes, or an error with the install line (or the version it needs)."""
    kind = "8-bit" if config.load_in_8bit else "4-bit"
    if not is_package_available("bitsandbytes"):
        raise MissingDependencyError("bitsandbytes", extra="bnb", feature=f"{kind} quantisation")
    if not is_bnb_available(_MIN_VERSION[kind]):
        raise MissingDependencyError(f"bitsandbytes>={_MIN_VERSION[kind]}", extra="bnb",
                                     feature=f"{kind} quantisation")
    import bitsandbytes

    return bitsandbytes


def has_4bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` holds a ``bnb.nn.Linear4bit`` layer (False without bitsandbytes
    imported: no such layer can exist, and importing it would cost seconds)."""
    bnb = sys.modules.get("bitsandbytes")
    if bnb is None:
        return False
    return any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())


def _matches(path: str, keys: Sequence[str]) -> bool:
    """``path`` is, ends with, or lies inside a listed module (whole name parts only)."""
    return any(path == k or path.endswith("." + k) or f".{k}." in f".{path}." for k in keys)


def get_keys_to_not_convert(model: nn.Module) -> list[str]:
    """Modules to leave unquantised by default: the output head (the last child) and the
    modules of tied weights; none for a transformers base model without tied weights."""
    tied = [name for group in find_tied_parameters(model) for name in group]
    prefix = getattr(model, "base_model_prefix", None)
    if not tied and prefix and not hasattr(model, prefix):
        return []
    children = [n for n, _ in model.named_children()]
    keys = dict.fromkeys([*tied, *children[-1:]])
    return list(dict.fromkeys(k.removesuffix(".weight").removesuffix(".bias") for k in keys))


def replace_with_bnb_layers(model: nn.Module, config: BnbQuantizationConfig,
                            modules_to_not_convert: Sequence[str] | None = None) -> nn.Module:
    """Swap every ``nn.Linear`` not listed for a bitsandbytes layer holding the same weights
    (still unquantised: that happens when they move to their device). In place."""
    bnb = _import_bnb(config)
    skip = list(modules_to_not_convert or ())
    replaced = 0
    for path, linear in list(model.named_modules()):
        if type(linear) is not nn.Linear or _matches(path, skip) or not path:
            continue
        with init_empty_weights():
            if config.load_in_8bit:
                layer = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features,
                                            linear.bias is not None, has_fp16_weights=False,
                                            threshold=config.llm_int8_threshold)
            else:
                layer = bnb.nn.Linear4bit(linear.in_features, linear.out_features,
                                          linear.bias is not None, config.bnb_4bit_compute_dtype,
                                          compress_statistics=config.bnb_4bit_use_double_quant,
                                          quant_type=config.bnb_4bit_quant_type)
        for name in ("weight", "bias"):
            value = getattr(linear, name)
            if value is not None and value.device.type != "meta":
                set_module_tensor_to_device(layer, name, value.device, value=value.data)
        layer.requires_grad_(False)
        parent, _, child = path.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
        replaced += 1
    if not replaced:
        logger.warning("load_and_quantize_model found no nn.Linear to quantise (models such as "
                       "GPT-2 use Conv1D): the model is unchanged.")
    return model


def _execution_device(device: Any) -> str:
    return f"cuda:{device}" if isinstance(device, int) else str(device)


def _default_device() -> Any:
    return torch.cuda.current_device() if torch.cuda.is_available() else "cpu"


def _offloaded(device_map: Mapping[str, Any]) -> list[str]:
    """Entries on disk, or in CPU RAM while a GPU executes: bitsandbytes layers run on their
    device, so these stay unquantised (Accelerate quantises 8-bit ones before offloading)."""
    gpu = _has_gpu(device_map)
    return [k for k, d in device_map.items() if _is_offload(d, gpu)]


def _has_gpu(device_map: Mapping[str, Any]) -> bool:
    return any(isinstance(d, int) for d in device_map.values())


def _is_offload(device: Any, gpu: bool) -> bool:
    """Whether ``device`` only stores weights: the disk, or the CPU while a GPU executes."""
    return device == "disk" or (device == "cpu" and gpu)


def _layer_device(name: str, device_map: Mapping[str, Any]) -> Any:
    return device_of(f"{name}.weight", device_map)


def _cast_to_torch_dtype(model: nn.Module, config: BnbQuantizationConfig,
                         keep: Sequence[str]) -> None:
    """Floating tensors (quantised layers' weights before quantisation included) to
    ``torch_dtype``, or float32 in ``keep``; tied weights stay tied."""
    tied = find_tied_parameters(model)
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        owner = name.rpartition(".")[0]
        if not tensor.is_floating_point() or tensor.is_meta:
            continue
        dtype = torch.float32 if _matches(owner, keep) else config.torch_dtype
        if tensor.dtype != dtype:
            set_module_tensor_to_device(model, name, tensor.device, value=tensor.data,
                                        dtype=dtype)
    retie_parameters(model, tied)


def _quantised_device_map(model: nn.Module, config: BnbQuantizationConfig, device_map: Any,
                          max_memory: Any, no_split: Sequence[str] | None,
                          bnb_layers: set[str]) -> dict[str, Any]:
    from accel_inference.device_map import infer_auto_device_map
    from accel_inference.sizing import get_balanced_memory

    if device_map is None:
        return {"": _default_device()}
    if isinstance(device_map, str):
        if device_map not in _AUTO_MAPS:
            raise ConfigurationError(f"device_map={device_map!r} is not known: use one of "
                                     f"{', '.join(_AUTO_MAPS)}, or a dict.")
        keep = config.keep_in_fp32_modules or []
        quantised = {f"{n}.weight" for n in bnb_layers}
        special = {n: (torch.float32 if _matches(n.rpartition(".")[0], keep)
                       else config.torch_dtype)
                   for n, _ in [*model.named_parameters(), *model.named_buffers()]
                   if n not in quantised}
        kwargs = {"dtype": config.target_dtype, "special_dtypes": special,
                  "no_split_module_classes": no_split}
        if device_map != "sequential":
            max_memory = get_balanced_memory(model, max_memory=max_memory,
                                             low_zero=device_map == "balanced_low_0", **kwargs)
        device_map = infer_auto_device_map(model, max_memory=max_memory, **kwargs)
        gpu = _has_gpu(device_map)
        stranded = [n for n in bnb_layers if _is_offload(_layer_device(n, device_map), gpu)]
        if stranded:
            raise ConfigurationError(
                f"device_map={device_map!r} offloads quantised layers {sorted(stranded)[:5]} to "
                "the CPU or disk, where bitsandbytes layers cannot run: raise max_memory of "
                "the GPUs (of the CPU when no GPU runs them), or pass a dict device_map "
                "(the modules it offloads stay unquantised).")
    return dict(device_map)


def load_and_quantize_model(model: nn.Module, bnb_quantization_config: BnbQuantizationConfig,
                            weights_location: str | os.PathLike[str] | None = None,
                            device_map: Any = None,
                            no_split_module_classes: Sequence[str] | None = None,
                            max_memory: Mapping[Any, Any] | None = None,
                            offload_folder: str | os.PathLike[str] | None = None,
                            offload_state_dict: bool = False) -> nn.Module:
    """Quantise ``model`` per ``bnb_quantization_config``; returns it (changed in place).

    A model with real weights is quantised as it is and moved to the GPU (the CPU without
    one). A model built with ``init_empty_weights`` is filled from ``weights_location`` (a
    file, a folder or a sharded index) per ``device_map`` (a dict, ``"auto"``,
    ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``; default: all on the GPU, or
    the CPU), then dispatched. ``skip_modules`` left as None is filled in on the config
    with :func:`get_keys_to_not_convert`; modules a dict map offloads stay unquantised.
    """
    config = bnb_quantization_config
    if not isinstance(config, BnbQuantizationConfig):
        raise ConfigurationError(f"bnb_quantization_config={config!r} must be a "
                                 "BnbQuantizationConfig(load_in_8bit=True) or (load_in_4bit=True).")
    _import_bnb(config)
    first = next(model.parameters(), None)
    on_meta = first is not None and first.is_meta
    if on_meta and weights_location is None:
        raise ConfigurationError("The model is on the meta device (init_empty_weights): pass "
                                 "weights_location= (the checkpoint file or folder to load).")
    if isinstance(device_map, Mapping):
        device_map = validate_device_map(device_map)
    if config.skip_modules is None:
        config.skip_modules = get_keys_to_not_convert(model)
    keep = list(config.keep_in_fp32_modules or [])
    offloaded = _offloaded(device_map) if isinstance(device_map, Mapping) and \
        len(device_map) > 1 else []
    skip = [*config.skip_modules, *keep, *offloaded]
    model.is_loaded_in_8bit = config.load_in_8bit
    model.is_loaded_in_4bit = config.load_in_4bit
    if not on_meta:
        logger.warning("Quantising a model whose weights are loaded: build it under "
                       "init_empty_weights() and pass weights_location to save memory.")
    replace_with_bnb_layers(model, config, modules_to_not_convert=skip)
    bnb_layers = _bnb_layer_names(model)
    if not on_meta:
        _cast_to_torch_dtype(model, config, keep)
        return model.to(_execution_device(_default_device()))
    from accel_inference.big_modeling import dispatch_model
    from accel_inference.loading import load_checkpoint_in_model

    device_map = _quantised_device_map(model, config, device_map, max_memory,
                                       no_split_module_classes, bnb_layers)
    load_checkpoint_in_model(model, weights_location, device_map, offload_folder=offload_folder,
                             dtype=config.torch_dtype, offload_state_dict=offload_state_dict,
                             keep_in_fp32_modules=keep)
    for name in bnb_layers:  # bitsandbytes quantises as the weights reach their device
        model.get_submodule(name).to(_execution_device(_layer_device(name, device_map)))
    return dispatch_model(model, device_map=device_map, offload_dir=offload_folder)


def _bnb_layer_names(model: nn.Module) -> set[str]:
    return {n for n, m in model.named_modules() if type(m).__module__.startswith("bitsandbytes")}


def get_quantized_model_device_map(model: nn.Module,
                                   bnb_quantization_config: BnbQuantizationConfig,
                                   device_map: Any = None, max_memory: Any = None,
                                   no_split_module_classes: Sequence[str] | None = None,
                                   ) -> dict[str, Any]:
    """The device map :func:`load_and_quantize_model` fills a model with (Accelerate's step of
    the same name): None puts everything on the GPU (the CPU without one), a dict is
    validated, an auto map is inferred with the quantised layers' sizes and refused if it
    would offload a quantised layer."""
    if isinstance(device_map, Mapping):
        device_map = validate_device_map(device_map)
    return _quantised_device_map(model, bnb_quantization_config, device_map, max_memory,
                                 no_split_module_classes, _bnb_layer_names(model))


def quantize_and_offload_8bit(model: nn.Module, param: Any, param_name: str, new_dtype: Any,
                              offload_folder: Any, offload_index: Any,
                              fp16_statistics: Any) -> None:
    """Refused: accel keeps offloaded modules unquantised (Accelerate quantises 8-bit ones
    before writing them to disk), so nothing quantised is ever offloaded."""
    raise ConfigurationError(
        f"quantize_and_offload_8bit({param_name!r}): accel does not offload quantised layers; "
        "load_and_quantize_model keeps the modules a device map offloads unquantised "
        "(docs/migration.md, Quantisation). Keep the layer on a GPU, or let it be offloaded "
        "unquantised.")


def get_parameter_device(parameter: nn.Module) -> torch.device:
    """The device of a module's first parameter (Accelerate's helper of the same name); a
    module without parameters is an error naming it."""
    first = next(iter(parameter.parameters()), None)
    if first is None:
        raise ConfigurationError(f"{type(parameter).__name__} has no parameters, so it has no "
                                 "parameter device; pass a module that holds weights.")
    return first.device

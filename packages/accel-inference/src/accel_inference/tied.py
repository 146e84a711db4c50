"""Tied parameters (one ``nn.Parameter`` under several names, e.g. embeddings and LM head).

Loading on ``meta`` and dispatching replace parameters one name at a time, which unties
them; these helpers find the groups first and tie them again after.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from accel_inference.tensors import get_module_and_name

__all__ = ["find_tied_parameters", "retie_parameters", "check_tied_parameters_on_same_device",
           "check_tied_parameters_in_config", "device_of"]

logger = logging.getLogger("accel.big_modeling")


def find_tied_parameters(model: nn.Module) -> list[list[str]]:
    """Groups of names that refer to the same parameter object, each group sorted."""
    by_id: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), []).append(name)
    return sorted(sorted(names) for names in by_id.values() if len(names) > 1)


def retie_parameters(model: nn.Module, tied_params: Sequence[Sequence[str]]) -> None:
    """Make every name of each group point at one parameter again (a non-meta one if any)."""
    for group in tied_params:
        params = [getattr(*get_module_and_name(model, name)) for name in group]
        chosen = next((p for p in params if p.device.type != "meta"), params[0])
        for name in group:
            owner, local = get_module_and_name(model, name)
            owner._parameters[local] = chosen


def device_of(name: str, device_map: Mapping[str, Any]) -> Any:
    """The device the map gives to ``name``: the entry of its longest mapped prefix."""
    probe = name
    while True:
        if probe in device_map:
            return device_map[probe]
        if not probe:
            raise KeyError(name)
        probe = probe.rpartition(".")[0]


def check_tied_parameters_on_same_device(tied_params: Sequence[Sequence[str]],
                                         device_map: Mapping[str, Any]) -> None:
    """Warn for each tied group the map splits across devices (the tie would break)."""
    for group in tied_params:
        devices = {name: device_of(name, device_map) for name in group}
        if len({str(d) for d in devices.values()}) > 1:
            logger.warning("Tied parameters are on different devices: %s. Put them on one "
                           "device or they will be loaded twice.", devices)


def check_tied_parameters_in_config(model: nn.Module) -> bool:
    """Whether the model's (transformers-style) config or class declares tied weights."""
    config = getattr(model, "config", None)
    declared = bool(getattr(config, "tie_word_embeddings", False)) or \
        bool(getattr(config, "tie_encoder_decoder", False))
    return declared or bool(getattr(model, "_tied_weights_keys", None))

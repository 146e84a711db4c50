"""Tied parameters (one ``nn.Parameter`` under several names, e.g. embeddings and LM head).

Loading on ``meta`` and dispatching replace parameters one name at a time, which unties
them; these helpers find the groups first and tie them again after.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from accel_state.errors import ConfigurationError
from torch import nn

from accel_inference.tensors import get_module_and_name, holds

__all__ = ["find_tied_parameters", "retie_parameters", "check_tied_parameters_on_same_device",
           "check_tied_parameters_in_config", "device_of", "get_module_size_with_ties",
           "tied_partners"]

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


def tied_partners(name: str, tied_groups: Sequence[Sequence[str]]) -> list[str]:
    """Tensors tied to a tensor inside block ``name`` but living outside it, group by group.

    Names are compared on whole dotted components: ``compute.weight_sub.p`` is outside
    ``compute.weight``.
    """
    partners: list[str] = []
    for group in tied_groups:
        if any(holds(name, n) for n in group):
            partners.extend(n for n in group if not holds(name, n))
    return partners


def get_module_size_with_ties(tied_params: Sequence[str], module_size: int,
                              module_sizes: Mapping[str, int],
                              modules_to_treat: Sequence[tuple[str, Any]]
                              ) -> tuple[int, list[str], list[Any]]:
    """Bytes a block needs when the blocks holding its tied partners move with it.

    ``tied_params`` are tensor names outside the block tied to a tensor inside it; each is
    looked up among ``modules_to_treat`` (the queue of ``(name, module)`` still to place),
    as the first queued block holding it (or the tensor itself, queued alone). Each tied
    tensor adds its holder's size less its own (it is stored once, with the block), and
    the holder is listed once per tied tensor, as Accelerate counts it: placements then
    match Accelerate's. Returns ``(size, holder names, holders)``. A tied name no queued
    block holds is an error naming it.
    """
    size = module_size
    names: list[str] = []
    blocks: list[Any] = []
    for param in tied_params:
        match = next(((n, m) for n, m in modules_to_treat if n and holds(n, param)), None)
        if match is None:
            raise ConfigurationError(
                f"The tied tensor {param!r} is in none of the blocks still to place "
                f"({[n for n, _ in modules_to_treat][:10]}): pass the queue that holds it, "
                "or run find_tied_parameters on the same model.")
        size += module_sizes.get(match[0], 0) - module_sizes.get(param, 0)
        names.append(match[0])
        blocks.append(match[1])
    return size, names, blocks

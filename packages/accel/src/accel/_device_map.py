"""Models dispatched over several devices (``device_map="auto"``) and distributed training.

A model loaded for big-model inference may be split across devices (its ``hf_device_map``
names more than one). Every process of a distributed run would then hold its own split
copy, which DDP/FSDP cannot wrap or synchronise; Accelerate refuses such a model in
``prepare``, and so does accel — with the way out in the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from accel_state import ConfigurationError, env

__all__ = ["DeviceMapMixin", "refuse_dispatched_models"]


def _dispatched_map(model: torch.nn.Module) -> dict[str, Any] | None:
    for module in model.modules():
        device_map = getattr(module, "hf_device_map", None)
        if isinstance(device_map, dict) and len(device_map) > 1:
            return device_map
    return None


def refuse_dispatched_models(accelerator: Any, models: Iterable[torch.nn.Module]) -> None:
    """Raise when a model split over several devices is prepared for a distributed run
    (unless ``ACCEL_BYPASS_DEVICE_MAP`` / ``ACCELERATE_BYPASS_DEVICE_MAP`` is true)."""
    if not accelerator.strategy.runs_distributed:
        return
    for model in models:
        device_map = _dispatched_map(model)
        if device_map is None or env.BYPASS_DEVICE_MAP.get_bool():
            continue
        shown = dict(list(device_map.items())[:4])
        more = ", ..." if len(device_map) > 4 else ""
        raise ConfigurationError(
            f"prepare() got a {type(model).__name__} dispatched over several devices "
            f"(hf_device_map={shown}{more}, e.g. loaded with device_map='auto'); it cannot "
            f"be trained in a distributed run ({accelerator.distributed_type.value}, "
            f"{accelerator.num_processes} processes). Run one process (python script.py or "
            "accel launch --num_processes 1), or load the whole model on each process's "
            "device (no device_map); set ACCEL_BYPASS_DEVICE_MAP=true to prepare it anyway.")


class DeviceMapMixin:
    """``Accelerator.verify_device_map``."""

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """True when ``model`` (or a submodule) was dispatched over several devices with a
        device map (``hf_device_map`` with more than one entry, e.g. ``device_map="auto"``):
        such a model is refused by :meth:`prepare` in a distributed run."""
        return _dispatched_map(model) is not None

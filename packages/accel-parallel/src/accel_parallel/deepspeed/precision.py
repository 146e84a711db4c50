"""What a DeepSpeed engine computes in, read from its config, and the input cast that lets
a user's float32 batches reach a bf16/fp16 engine unchanged ("same code as before")."""

from __future__ import annotations

from typing import Any

import torch
from accel_state import recursively_apply

__all__ = ["cast_floating_inputs", "config_precision"]


def config_precision(config: dict[str, Any]) -> str:
    """``"fp16"``, ``"bf16"`` or ``"no"``: what the config's ``enabled`` flags turn on."""
    for name in ("fp16", "bf16"):
        if (config.get(name) or {}).get("enabled") is True:
            return name
    return "no"


def cast_floating_inputs(engine: torch.nn.Module, config: dict[str, Any]) -> None:
    """Make the user's float batches reach a bf16/fp16 engine: every floating-point tensor
    among the forward's arguments (nested in lists, tuples, dicts) is cast to the engine's
    dtype; integer tensors (token ids, labels) and other values pass unchanged. DeepSpeed
    does this for fp16 only, with ``"fp16": {"auto_cast": true}``; without it a float32
    batch meets bf16 weights and the first matmul fails. Outputs stay in the engine's dtype,
    as under Accelerate. Nothing is registered for an fp32 engine or under DeepSpeed's own
    ``torch_autocast`` (which keeps fp32 weights)."""
    precision = config_precision(config)
    if precision == "no" or (config.get("torch_autocast") or {}).get("enabled"):
        return
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16

    def cast(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(dtype) if tensor.is_floating_point() else tensor

    def hook(module: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return recursively_apply(cast, args), recursively_apply(cast, kwargs)

    engine.register_forward_pre_hook(hook, with_kwargs=True)

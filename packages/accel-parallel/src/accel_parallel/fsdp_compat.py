"""Accelerate's small FSDP helpers that transformers calls around ``from_pretrained``:
switching rank-0-only weight loading on and off, and parameter names without the
wrapper prefixes activation checkpointing and ``torch.compile`` insert."""

from __future__ import annotations

from typing import Any

from accel_state import env

__all__ = ["disable_fsdp_ram_efficient_loading", "enable_fsdp_ram_efficient_loading",
           "fsdp2_canonicalize_names"]

_WRAPPER_PARTS = ("_checkpoint_wrapped_module", "_orig_mod")


def enable_fsdp_ram_efficient_loading() -> None:
    """Turn on rank-0-only loading of pretrained weights (``FSDP_CPU_RAM_EFFICIENT_LOADING``)
    and FSDP itself when nothing chose a strategy yet, for the ``from_pretrained`` that follows."""
    if not env.USE_FSDP.is_set():
        env.USE_FSDP.set("true")
    env.FSDP_CPU_RAM_EFFICIENT_LOADING.set("true")


def disable_fsdp_ram_efficient_loading() -> None:
    """Turn rank-0-only loading of pretrained weights off again (every rank loads them)."""
    env.FSDP_CPU_RAM_EFFICIENT_LOADING.set("false")


def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> dict[str, Any]:
    """``named_params`` keyed by the names of the unwrapped model: the
    ``_checkpoint_wrapped_module`` and ``_orig_mod`` path parts are dropped."""
    return {".".join(p for p in name.split(".") if p not in _WRAPPER_PARTS): value
            for name, value in named_params.items()}

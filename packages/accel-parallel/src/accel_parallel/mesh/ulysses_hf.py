"""Ulysses for transformers models: through their attention interface.

transformers' attention layers look their attention function up by name
(``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``) and call it as
``f(module, query, key, value, attention_mask, **kwargs)`` with ``(batch, heads, seq,
head_dim)`` tensors (key/value with the model's key/value head count), getting back
``(batch, seq, heads, head_dim)``. accel registers one more name, ``accel_ulysses_<core>``,
whose function exchanges sequence for heads, calls the core implementation (``sdpa``,
``flash_attention_2`` / ``_3``, from ``sp_attn_implementation``) and exchanges back, and
points only the prepared model's config at it: no implementation other models use is
replaced. The name has no mask function, so transformers builds no attention mask (its
shape would be the shard's); the core attends causally over the gathered sequence, and
``position_ids`` (global, from the sharded batch) are gathered for the flash kernels'
packed-sequence detection.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from accel_state import ConfigurationError

from accel_parallel.mesh.ulysses import all_to_all, repeat_kv_heads, seq_to_heads

__all__ = ["uses_attention_interface", "apply_to_transformers", "ULYSSES_PREFIX",
           "SP_ATTN_IMPLEMENTATIONS"]

ULYSSES_PREFIX = "accel_ulysses_"
#: the core implementations Ulysses runs with (besides hub-hosted flash-attn kernels): they
#: attend by position, not by a mask (``sp_attn_implementation``)
SP_ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "flash_attention_3")
#: registered name -> the sp process group its function exchanges over
_GROUPS: dict[str, Any] = {}


def uses_attention_interface(model: torch.nn.Module) -> bool:
    """A transformers model: its config names an attention implementation."""
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "_attn_implementation") \
        and hasattr(model, "set_attn_implementation")


def _core_name(model: torch.nn.Module, handler: Any) -> str:
    wanted = getattr(handler, "sp_attn_implementation", None)
    current = str(model.config._attn_implementation or "eager")
    current = current.removeprefix(ULYSSES_PREFIX)
    if wanted is None:
        return current if current in SP_ATTN_IMPLEMENTATIONS else "sdpa"
    return wanted


def _gathered_positions(position_ids: torch.Tensor, group: Any) -> torch.Tensor:
    parts = [torch.empty_like(position_ids) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, position_ids.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


def _make_attention(name: str, core: str) -> Any:
    def ulysses_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attention_mask: Any, *args: Any,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        group = _GROUPS[name]
        size = dist.get_world_size(group)
        if query.shape[1] % size:
            raise ConfigurationError(
                f"Ulysses sequence parallelism splits the {query.shape[1]} attention heads "
                f"over sp_size={size} processes, and they do not divide: use an sp_size that "
                "divides the head count.")
        key = repeat_kv_heads(key, query.shape[1], size)
        value = repeat_kv_heads(value, query.shape[1], size)
        query, key, value = (seq_to_heads(t, group) for t in (query, key, value))
        if isinstance(kwargs.get("position_ids"), torch.Tensor):
            kwargs["position_ids"] = _gathered_positions(kwargs["position_ids"], group)
        groups = getattr(module, "num_key_value_groups", None)
        if groups is not None:  # the ratio of this rank's heads, for the core's repeat
            module.num_key_value_groups = query.shape[1] // key.shape[1]
        try:
            out, _ = ALL_ATTENTION_FUNCTIONS[core](module, query, key, value, None, *args,
                                                   **kwargs)
        finally:
            if groups is not None:
                module.num_key_value_groups = groups
        return all_to_all(out, group, scatter_dim=1, gather_dim=2), None  # (b, s/sp, h, d)

    ulysses_attention.__name__ = name
    return ulysses_attention


def apply_to_transformers(model: torch.nn.Module, group: Any, handler: Any = None) -> str:
    """Point ``model`` at the Ulysses attention over ``group``; returns the registered name."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    core = _core_name(model, handler)
    if core not in ALL_ATTENTION_FUNCTIONS:
        raise ConfigurationError(
            f"sp_attn_implementation={core!r} is not an attention implementation this "
            f"transformers has ({', '.join(sorted(ALL_ATTENTION_FUNCTIONS.valid_keys()))}); "
            "use 'sdpa', or install the flash-attn kernel it names.")
    name = ULYSSES_PREFIX + core
    _GROUPS[name] = group
    if name not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(name, _make_attention(name, core))
    model.set_attn_implementation(name)
    return name

"""Tensor (and sequence) parallelism with ``parallelize_module``, and what TP changes for
the rest of a step: the gradient norm over parameters that live on different meshes.

Applied first in the strategy's order (TP, activation checkpointing, compile, FSDP2): each
module a plan entry matches is parallelized over the ``tp`` dimension of the run's one
mesh, so FSDP2 (over ``dp_shard``) then makes its DTensors two-dimensional.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from accel_state import ConfigurationError

from accel_parallel.mesh.tp_plan import resolve_tp_plan
from accel_parallel.mesh.tp_styles import ReplicateParallel

__all__ = ["ReplicateParallel", "apply_tensor_parallel", "broadcast_unsharded",
           "clip_grad_norm_"]


def apply_tensor_parallel(model: torch.nn.Module, tp_mesh: Any,
                          plan: Mapping[str, Any] | None = None,
                          enable_async_tp: bool = False) -> dict[str, Any]:
    """Parallelize ``model`` in place over ``tp_mesh`` by ``plan`` (else its own plan);
    returns the resolved ``{module path: style}``. Weights come from rank 0's model."""
    from torch.distributed.tensor.parallel import parallelize_module

    resolved = resolve_tp_plan(model, plan)
    if enable_async_tp:
        if tp_mesh.device_type != "cuda":
            raise ConfigurationError(
                "TorchTensorParallelConfig(enable_async_tp=True) needs CUDA (symmetric memory); "
                f"this run's device is {tp_mesh.device_type!r}. Set enable_async_tp=False.")
        import torch._inductor.config as inductor_config
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        inductor_config._micro_pipeline_tp = True
        enable_symm_mem_for_group(tp_mesh.get_group().group_name)
    parallelize_module(model, tp_mesh, resolved)
    return resolved


def broadcast_unsharded(model: torch.nn.Module, src: int = 0, group: Any = None) -> None:
    """Give every process of ``group`` (default: all) global rank ``src``'s values of the
    parameters and buffers tensor parallelism left whole (plain tensors): the TP ranks compute
    them redundantly, so they must start equal even when each process initialised its model
    differently. (Sharded ones already came from rank 0 through ``parallelize_module``.)"""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            if not hasattr(tensor, "to_local"):  # a DTensor is already consistent
                dist.broadcast(tensor.data, src=src, group=group)


def _placement_key(grad: torch.Tensor) -> Any:
    """``(mesh, sharded mesh dims)`` of a DTensor gradient (whose per-rank norms add up over
    those dims); None for a plain tensor; ``"partial"`` for one with pending reductions."""
    spec = getattr(grad, "_spec", None)
    if spec is None:
        return None
    if any(p.is_partial() for p in spec.placements):
        return "partial"
    # sharded along a dim: Shard, or FSDP2's _StridedShard under TP (not is_shard())
    return (spec.mesh, tuple(i for i, p in enumerate(spec.placements) if not p.is_replicate()))


def _local_norms(tensors: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    if hasattr(torch, "_foreach_norm") and tensors[0].device.type in ("cpu", "cuda"):
        norms = torch._foreach_norm(tensors, norm_type)
    else:
        norms = [torch.linalg.vector_norm(t, norm_type) for t in tensors]
    return torch.stack([n.float() for n in norms])


def _group_value(key: Any, grads: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    """``max |g|`` (inf-norm) or ``sum |g|^p`` of one group, over every rank's shards."""
    import torch.distributed as dist

    inf = math.isinf(norm_type)
    if key == "partial":  # rare: let DTensor do the reductions, one group at a time
        norms = torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads])
        total = torch.linalg.vector_norm(norms, norm_type).full_tensor().float()
        return total if inf else total ** norm_type
    local = _local_norms([g.to_local() if key is not None else g for g in grads], norm_type)
    value = local.max() if inf else (local ** norm_type).sum()
    if key is not None:
        mesh, sharded = key
        for dim in sharded:  # shards of one tensor: their contributions add up (max for inf)
            dist.all_reduce(value, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM,
                            group=mesh.get_group(dim))
    return value


def clip_grad_norm_(parameters: Iterable[torch.nn.Parameter] | torch.Tensor, max_norm: float,
                    norm_type: float = 2.0) -> torch.Tensor:
    """Clip by the norm of the whole gradient, whose pieces may be DTensors on different
    meshes (TP weights on ``tp`` or 2-D, the rest sharded over ``dp_shard`` only) or plain
    tensors. Local norms are taken in one fused op and summed over each group's sharded mesh
    dimensions (one all-reduce per distinct set). Returns the total norm before clipping, a
    plain tensor equal on every rank."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    norm_type = float(norm_type)
    if not grads:
        return torch.tensor(0.0)
    groups: dict[Any, list[torch.Tensor]] = {}
    for grad in grads:
        groups.setdefault(_placement_key(grad), []).append(grad)
    device = (grads[0].to_local() if hasattr(grads[0], "to_local") else grads[0]).device
    values = torch.stack([_group_value(k, g, norm_type).to(device) for k, g in groups.items()])
    total = values.max() if math.isinf(norm_type) else values.sum() ** (1.0 / norm_type)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        locals_ = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        for dtype in {t.dtype for t in locals_}:
            same = [t for t in locals_ if t.dtype == dtype]
            torch._foreach_mul_(same, coefficient.to(dtype))
    return total

"""Collectives over nested structures of tensors: gather, broadcast, reduce, pad, ...

Names and behaviour follow ``accelerate.utils.operations``. The world is read from
``torch.distributed`` directly (no state object needed): without an initialised
process group, or with a world of one process, every collective is the identity for
that one process. The collectives also take a keyword-only ``group=`` (a
``torch.distributed.ProcessGroup``; ``None``: the default group): under tensor
parallelism the data-parallel world is a subgroup of the processes, and gathering
metrics or sharing data must stay inside it. The pure structure helpers live in
:mod:`accel_state.structures` and are re-exported here, so ``accel_state.operations`` is
the one import path.

Debug mode (``ACCEL_DEBUG_MODE=1`` / ``ACCELERATE_DEBUG_MODE=1``): before a verified
collective, every rank shares the shapes of its inputs; on a mismatch *every* rank
raises :class:`DistributedOperationException` naming each rank's shapes, instead of
the job hanging or failing deep inside the backend (:mod:`accel_state.operation_checks`,
whose two decorators are re-exported here).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import TYPE_CHECKING, Any

import torch

from accel_state.errors import (
    ConfigurationError,
    DistributedError,
    DistributedOperationException,
)
from accel_state.groups import _collective_device, _local_device, group_size, source_rank
from accel_state.operation_checks import chained_operation, verify_operation
from accel_state.structures import (
    CannotPadNestedTensorWarning,
    ConvertOutputsToFp32,
    TensorInformation,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    find_batch_size,
    find_device,
    get_data_structure,
    get_shape,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_tensor_information,
    is_torch_tensor,
    listify,
    pad_input_tensors,
    recursively_apply,
    send_to_device,
    slice_tensors,
)

__all__ = [
    # structures (re-exported)
    "TensorInformation", "CannotPadNestedTensorWarning", "is_torch_tensor",
    "is_tensor_information", "is_namedtuple", "honor_type", "recursively_apply",
    "send_to_device", "get_data_structure", "get_shape", "initialize_tensors", "listify",
    "find_batch_size", "ignorant_find_batch_size", "find_device", "concatenate",
    "slice_tensors", "pad_input_tensors", "convert_to_fp32", "ConvertOutputsToFp32",
    "convert_outputs_to_fp32",
    # collectives
    "DistributedOperationException", "verify_operation", "chained_operation", "gather",
    "gather_object", "broadcast", "broadcast_object_list", "reduce", "pad_across_processes",
    "copy_tensor_to_devices", "GatheredParameters",
]

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

_REDUCTIONS = ("mean", "sum", "max", "none")


def _leaves(data: Any, strict: bool = True) -> list[torch.Tensor]:
    """Tensors of ``data`` in depth-first order; other leaves raise ``TypeError`` if ``strict``."""
    found: list[torch.Tensor] = []
    recursively_apply(found.append, data, error_on_other_type=strict)
    return found


# --- collectives ---------------------------------------------------------------------------

def _gather_one(tensor: torch.Tensor, world: int,
                group: ProcessGroup | None = None) -> torch.Tensor:
    if tensor.ndim == 0:
        tensor = tensor.clone()[None]
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.device.type == "cpu":
        parts = [torch.empty_like(tensor) for _ in range(world)]
        torch.distributed.all_gather(parts, tensor, group=group)
        return torch.cat(parts, dim=0)
    out = torch.empty((world * tensor.shape[0], *tensor.shape[1:]), dtype=tensor.dtype,
                      device=tensor.device)
    torch.distributed.all_gather_into_tensor(out, tensor, group=group)
    return out


@verify_operation
def gather(tensor: Any, *, group: ProcessGroup | None = None) -> Any:
    """All-gather every tensor of a nested structure, concatenated along dim 0 in rank order.

    0-d tensors become 1-d (one value per process). All ranks must pass the same shapes.
    ``group``: gather among its processes only (in group-rank order); ``None``: all.
    """
    world = group_size(group)
    if world == 1:
        return tensor
    return recursively_apply(_gather_one, tensor, world, group, error_on_other_type=True)


def gather_object(object: Any, *,  # noqa: A002 - Accelerate's argument name
                  group: ProcessGroup | None = None) -> list[Any]:
    """All-gather picklable objects; a list on every rank, in rank order.

    When every rank passes a list (or tuple) the result is their concatenation, as in
    Accelerate (``gather_object([x])`` -> one item per rank); otherwise it is the list
    of the per-rank objects. ``group``: among its processes only; ``None``: all.
    """
    world = group_size(group)
    if world == 1:
        if isinstance(object, list):
            return object
        return list(object) if isinstance(object, tuple) else [object]
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, object, group=group)
    if all(isinstance(item, (list, tuple)) for item in gathered):
        return [x for item in gathered for x in item]
    return gathered


def _broadcast_one(tensor: torch.Tensor, src: int,
                   group: ProcessGroup | None = None) -> torch.Tensor:
    torch.distributed.broadcast(tensor, src=src, group=group)
    return tensor


@verify_operation
def broadcast(tensor: Any, from_process: int = 0, *,
              group: ProcessGroup | None = None) -> Any:
    """Overwrite every tensor of a nested structure (in place) with ``from_process``'s values.

    Without ``group`` ``from_process`` is a global rank (as in torch and Accelerate); with
    one it is the rank *within* ``group`` (0: the group's first process), converted with
    ``torch.distributed.get_global_rank``, so the same call works in every group.
    """
    if group_size(group) == 1:
        return tensor
    return recursively_apply(_broadcast_one, tensor, error_on_other_type=True,
                             src=source_rank(from_process, group), group=group)


def broadcast_object_list(object_list: list[Any], from_process: int = 0, *,
                          group: ProcessGroup | None = None) -> list[Any]:
    """Replace the items of ``object_list`` (in place) with those of ``from_process``.

    ``from_process`` is a global rank without ``group`` and the rank within ``group``
    with one, as in :func:`broadcast`.
    """
    if group_size(group) > 1:
        torch.distributed.broadcast_object_list(
            object_list, src=source_rank(from_process, group), group=group)
    return object_list


def _reduce_one(tensor: torch.Tensor, world: int, reduction: str, scale: float,
                group: ProcessGroup | None = None) -> torch.Tensor:
    result = tensor.clone()
    if world > 1:
        ops = torch.distributed.ReduceOp
        torch.distributed.all_reduce(result, ops.MAX if reduction == "max" else ops.SUM,
                                     group=group)
    if reduction == "mean":
        result = result / world  # out of place: an integer mean comes back as float
    if scale != 1.0:
        result = result * scale
    return result


@verify_operation
def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0, *,
           group: ProcessGroup | None = None) -> Any:
    """All-reduce every tensor of a nested structure; inputs are not modified.

    ``"sum"`` sums across ranks, ``"mean"`` divides that sum by the world size, ``"max"``
    takes the element-wise maximum, and ``"none"`` (as in Accelerate) also returns the sum
    without dividing. The result is then multiplied by ``scale`` (Accelerate applies
    ``scale`` only on XLA). ``group``: reduce among its processes only (the mean divides by
    its size); ``None``: all. Any other name (``"min"``, a typo) raises
    ``ConfigurationError``, where Accelerate silently sums.
    """
    if reduction not in _REDUCTIONS:
        raise ConfigurationError(
            f"Unknown reduction {reduction!r}: use one of {', '.join(map(repr, _REDUCTIONS))}.")
    return recursively_apply(_reduce_one, tensor, group_size(group), error_on_other_type=True,
                             reduction=reduction, scale=scale, group=group)


def _pad_plan(tensor: torch.Tensor, dim: int) -> tuple[int, int]:
    """``(ndim, size along dim)`` of a leaf; ``size`` is -1 where it cannot be padded."""
    if getattr(tensor, "is_nested", False) or not -tensor.ndim <= dim < tensor.ndim:
        return tensor.ndim, -1
    return tensor.ndim, tensor.shape[dim]


def _pad_one(tensor: torch.Tensor, dim: int, target: int, pad_index: Any,
             pad_first: bool) -> torch.Tensor:
    dim = dim % tensor.ndim
    old = tensor.shape[dim]
    if old == target:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = target
    padded = tensor.new_full(shape, pad_index)
    start = target - old if pad_first else 0
    padded.narrow(dim, start, old).copy_(tensor)
    return padded


@chained_operation
def pad_across_processes(tensor: Any, dim: int = 0, pad_index: Any = 0,
                         pad_first: bool = False, *, group: ProcessGroup | None = None) -> Any:
    """Pad every tensor along ``dim`` to the largest size any rank has, so it can be gathered.

    ``group``: the largest size among its processes (those that will gather); ``None``: all.

    One collective for the whole structure. Nested tensors are returned unchanged
    (with :class:`CannotPadNestedTensorWarning`), as are tensors that have no
    dimension ``dim``. A leaf whose number of dimensions differs across ranks raises
    :class:`DistributedOperationException` on every rank.
    """
    leaves = _leaves(tensor)
    plans = [_pad_plan(t, dim) for t in leaves]
    if any(getattr(t, "is_nested", False) for t in leaves):
        warnings.warn("Cannot pad a nested tensor across processes: it has no single size "
                      "along a dimension. It is returned unchanged.",
                      CannotPadNestedTensorWarning, stacklevel=3)
    world = group_size(group)
    if world == 1:
        return tensor
    device = leaves[0].device if leaves else _collective_device()
    local = torch.tensor(plans, dtype=torch.int64, device=device).reshape(-1, 2)
    every = gather(local, group=group).reshape(world, -1, 2).cpu()
    ndims = every[:, :, 0]
    mismatched = (ndims != ndims[0]).any(dim=0).nonzero().flatten().tolist()
    if mismatched:
        rows = "\n  - ".join(f"Process {r}: {ndims[r].tolist()}" for r in range(world))
        raise DistributedOperationException(
            f"Cannot pad across processes: the tensor(s) at position(s) {mismatched} (depth-first) "
            f"of the structure have a different number of dimensions on different processes "
            f"(ndim of each tensor, "
            f"per process):\n  - {rows}\nEvery process must pass tensors of the same ndim.")
    targets = iter(every[:, :, 1].max(dim=0).values.tolist())

    def _apply(t: torch.Tensor) -> torch.Tensor:
        target = next(targets)
        return t if target < 0 else _pad_one(t, dim, target, pad_index, pad_first)

    return recursively_apply(_apply, tensor, error_on_other_type=True)


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """Send a tensor that exists on one process only (``None`` elsewhere) to every process.

    Unlike :func:`broadcast`, the receivers need not know its shape or dtype. When more
    than one process passes a tensor, the lowest rank's wins.
    """
    world = group_size()
    info = None if tensor is None else (tuple(tensor.shape), tensor.dtype, tensor.device.type)
    infos = [info] if world == 1 else gather_object([info])
    owners = [rank for rank, item in enumerate(infos) if item is not None]
    if not owners:
        raise DistributedError("copy_tensor_to_devices got None on every process: pass the "
                               "tensor on the process that has it.")
    source = owners[0]
    if world == 1:
        return tensor  # type: ignore[return-value]
    if tensor is None or torch.distributed.get_rank() != source:
        shape, dtype, kind = infos[source]  # same device type as the sender's, for the backend
        tensor = torch.empty(shape, dtype=dtype, device=_local_device(kind))
    else:
        tensor = tensor.contiguous()
    torch.distributed.broadcast(tensor, src=source)
    return tensor


class GatheredParameters:
    """Context manager: gather ZeRO-3 partitioned parameters for the block.

    Outside DeepSpeed ZeRO-3 (no parameter carries DeepSpeed's ``ds_id``) it does
    nothing, as in Accelerate. The DeepSpeed path delegates to
    ``deepspeed.zero.GatheredParameters``; DeepSpeed support itself lands with
    accel-parallel's DeepSpeed strategy.
    """

    def __init__(self, params: Any, modifier_rank: int | None = None,
                 fwd_module: Any = None, enabled: bool = True) -> None:
        if params is not None and not isinstance(params, (torch.Tensor, list, tuple)):
            params = list(params)  # a generator (model.parameters()) must survive two passes
        self.params = params
        self.modifier_rank = modifier_rank
        self.fwd_module = fwd_module
        self.enabled = enabled
        self._stack = contextlib.ExitStack()

    def _zero3_params(self) -> bool:
        params = self.params
        if isinstance(params, torch.Tensor):
            params = [params]
        return "deepspeed" in sys.modules and any(hasattr(p, "ds_id") for p in (params or ()))

    def __enter__(self) -> GatheredParameters:
        if self.enabled and self._zero3_params():
            from deepspeed.zero import GatheredParameters as _DeepSpeedGathered

            self._stack.enter_context(_DeepSpeedGathered(
                self.params, modifier_rank=self.modifier_rank, fwd_module=self.fwd_module,
                enabled=True))
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)

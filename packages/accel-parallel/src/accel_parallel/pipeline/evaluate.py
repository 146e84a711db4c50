"""Forward-only calls of a pipelined model: what an evaluation loop gets back.

Under ``torch.no_grad()``, in ``model.eval()`` mode, or for a model prepared with
``evaluation_mode=True``, the call runs only the forward of every micro-batch (torch's
``schedule.eval`` where torch has it). The last stage's output is then sent to every rank of
the pipeline (:func:`share_output`: its structure, shapes and dtypes first, then the
tensors), so ``accelerator.gather_for_metrics(model(x))`` works on every process; with a
target, the call returns the mean loss instead (:func:`mean_loss`, the mean the training
call computes), sent the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from accel_state import ConfigurationError

__all__ = ["batch_key", "mean_loss", "share_output", "split_micro"]

_KINDS = {torch.Tensor: "tensor", tuple: "tuple", list: "list"}


def batch_key(args: tuple[Any, ...], kwargs: dict[str, Any], target: Any) -> tuple[Any, ...]:
    """What fixes a schedule: torch's stages infer their buffers' shapes at the first step
    and keep them, so each batch shape (the same on every rank of the pipeline: they read
    the same batches) gets a schedule of its own."""
    def describe(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return ("t", tuple(value.shape), str(value.dtype))
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, tuple(describe(v) for v in value))
        if isinstance(value, dict):
            return ("d", tuple((k, describe(v)) for k, v in value.items()))
        return ("v", type(value).__name__, value if isinstance(value, (bool, int, str)) else
                None)

    return (describe(args), describe(dict(sorted(kwargs.items()))), describe(target))


def split_micro(value: Any, parts: int) -> list[Any]:
    """``value`` (a tensor, or a tuple / list of them) cut into ``parts`` along the first
    dimension, as the schedule cuts its inputs and targets."""
    if isinstance(value, torch.Tensor):
        return list(torch.tensor_split(value, parts))
    if isinstance(value, (tuple, list)):
        columns = [split_micro(v, parts) for v in value]
        return [type(value)(column[i] for column in columns) for i in range(parts)]
    return [value] * parts


def mean_loss(output: Any, target: Any, loss_fn: Callable[[Any, Any], Any],
              parts: int) -> torch.Tensor:
    """The training call's loss without its backward: ``loss_fn`` per micro-batch, each
    divided by the number of micro-batches, summed (float32)."""
    losses = [loss_fn(out, tgt).detach().float() / parts
              for out, tgt in zip(split_micro(output, parts), split_micro(target, parts),
                                  strict=True)]
    return torch.stack(losses).sum()


def _describe_output(output: Any) -> tuple[str, list[tuple[tuple[int, ...], torch.dtype]]]:
    kind = next((name for cls, name in _KINDS.items() if isinstance(output, cls)), None)
    leaves = [output] if kind == "tensor" else list(output) if kind else []
    if kind is None or not all(isinstance(t, torch.Tensor) for t in leaves):
        found = type(output).__name__ if kind is None else "a sequence holding " + ", ".join(
            sorted({type(t).__name__ for t in leaves if not isinstance(t, torch.Tensor)}))
        return f"error:{found}", []
    return kind, [(tuple(t.shape), t.dtype) for t in leaves]


def share_output(output: Any, topology: Any, device: torch.device, model_name: str) -> Any:
    """The last stage's ``output`` (a tensor, or a tuple / list of tensors) on every rank of
    the pipeline; ``output`` is only read on the rank holding the last stage."""
    import torch.distributed as dist

    if topology.pp_size == 1:
        return output
    source = topology.global_rank(topology.pp_size - 1)
    header: list[Any] = [_describe_output(output) if topology.has_last else None]
    dist.broadcast_object_list(header, src=source, group=topology.group,
                               device=device if device.type != "cpu" else None)
    kind, metas = header[0]
    if kind.startswith("error:"):
        raise ConfigurationError(
            f"The last stage of the pipeline-parallel {model_name} returned "
            f"{kind.removeprefix('error:')}, which cannot be sent to the other stages' ranks: "
            "a forward-only call returns a tensor or a tuple of tensors (transformers' "
            "models: call with return_dict=False, use_cache=False).")
    if topology.has_last:
        leaves = [output] if kind == "tensor" else list(output)
        tensors = [t.detach().to(device).contiguous() for t in leaves]
    else:
        tensors = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in metas]
    for tensor in tensors:
        dist.broadcast(tensor, src=source, group=topology.group)
    if kind == "tensor":
        return tensors[0]
    return tuple(tensors) if kind == "tuple" else tensors

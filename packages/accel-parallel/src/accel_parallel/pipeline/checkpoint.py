"""Checkpoints of a pipelined model: every rank writes its own stages' state.

``save_state``/``load_state`` go through accel-checkpoint's ``"sharded"`` writer (DCP),
found by name in the ``accel.checkpoint_layouts`` entry-point registry (accel-parallel does
not import accel-checkpoint, DESIGN.md §3): the stages' parameter names are the whole
model's, so each rank's DCP items are its own stages' (replicas of one stage write one
copy) and the checkpoint loads back into the same pipeline (``load_state(strict=False)``
too: the writer says what the sharded one says, ``loads_non_strict``, and hands the names on).
``get_state_dict`` /
``save_model`` need the whole model on the main process: :meth:`full_state_dict` gathers
every stage's full tensors over the pipeline group, in the original order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from accel_state.registry import Registry

from accel_parallel.pipeline.model import PipelinedModel

__all__ = ["PipelineCheckpointWriter", "StageOptimizer", "gather_full_state_dict"]

_SHARDED = "sharded"


def _sharded_writer() -> Any:
    layouts: Registry[Any] = Registry("accel.checkpoint_layouts", "checkpoint layout")
    found = layouts.get(_SHARDED)
    return found() if isinstance(found, type) else found


def gather_full_state_dict(pipeline: PipelinedModel, dp_rank: int) -> dict[str, torch.Tensor]:
    """The whole model's state dict (CPU tensors, original names and order) on global rank
    0, ``{}`` elsewhere; a collective over every rank."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    local = get_model_state_dict(pipeline.module, options=StateDictOptions(
        full_state_dict=True, cpu_offload=False))
    local = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in local.items()}
    topology = pipeline.topology
    if topology.pp_size == 1:
        return local if dist.get_rank() == 0 else {}
    if dp_rank != 0:  # the first data-parallel replica of each stage sends it
        return {}
    destination = topology.global_rank(0)
    parts: list[Any] | None = [None] * topology.pp_size if dist.get_rank() == destination \
        else None
    dist.gather_object(local, parts, dst=destination, group=topology.group)
    if dist.get_rank() != 0 or parts is None:
        return {}
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    ordered = {k: merged[k] for k in pipeline.key_order if k in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    return ordered


class StageOptimizer:
    """An optimizer's state as DCP saves it, under this pipeline position's own key.

    torch keys the optimizer's parameter groups by index (``param_groups.0.params``): the
    ranks of different stages would write the same keys with different values, and one
    would win. Nested under ``pp<rank>``, each stage's groups are its own, and the replicas
    of one stage still share their (sharded) state."""

    def __init__(self, pipeline: PipelinedModel, optimizer: torch.optim.Optimizer) -> None:
        self.pipeline = pipeline
        self.optimizer = optimizer
        self.key = f"pp{pipeline.topology.pp_rank}"

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return {self.key: get_optimizer_state_dict(self.pipeline.module, self.optimizer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(self.pipeline.module, self.optimizer, state[self.key])


class PipelineCheckpointWriter:
    """The ``"sharded"`` writer for this rank's stages, plus the whole-model state dict."""

    layout = _SHARDED

    def __init__(self, pipelines: list[PipelinedModel], dp_rank: int) -> None:
        self._inner = _sharded_writer()
        self.unpickles = self._inner.unpickles
        #: ``load`` takes ``non_strict=`` (model entry names) when the sharded writer does
        self.loads_non_strict = bool(getattr(self._inner, "loads_non_strict", False))
        self._pipelines = pipelines
        self._dp_rank = dp_rank

    def save(self, staging: Path, objects: Mapping[str, Any], rank: int,
             world_size: int) -> list[str]:
        return self._inner.save(staging, self._local(objects), rank, world_size)

    def load(self, path: Path, objects: Mapping[str, Any], rank: int, world_size: int,
             **options: Any) -> None:
        """The sharded writer's load of this rank's stages; ``options`` (``non_strict=``
        names: those models load as ``strict=False``) go to it as they are."""
        self._inner.load(path, self._local(objects), rank, world_size, **options)

    def _local(self, objects: Mapping[str, Any]) -> dict[str, Any]:
        local: dict[str, Any] = {}
        for name, obj in objects.items():
            if isinstance(obj, PipelinedModel):
                obj = obj.module
            elif isinstance(obj, torch.optim.Optimizer):
                obj = StageOptimizer(self._owner(obj), obj)
            local[name] = obj
        return local

    def _owner(self, optimizer: torch.optim.Optimizer) -> PipelinedModel:
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for pipeline in self._pipelines:
            if any(id(p) in params for p in pipeline.module.parameters()):
                return pipeline
        from accel_state import ConfigurationError

        raise ConfigurationError(
            "An optimizer's parameters belong to no pipeline-parallel model of this run: "
            "prepare the model it optimizes together with it (accelerator.prepare(model, "
            "optimizer)).")

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        for pipeline in self._pipelines:
            if model is pipeline or model is pipeline.module:
                return gather_full_state_dict(pipeline, self._dp_rank)
        return self._inner.full_state_dict(model)

    def __repr__(self) -> str:
        return f"PipelineCheckpointWriter({self._inner!r})"

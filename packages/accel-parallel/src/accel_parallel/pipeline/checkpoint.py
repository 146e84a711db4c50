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
    """An optimizer's state as DCP saves it: keyed by the whole model's parameter names, so
    that a checkpoint loads at any stage split (another schedule, stages per rank, or no
    pipeline at all through the across-layouts reader).

    ``state`` is keyed by parameter name, each stage writing its own (replicas of a stage
    write the same). ``param_groups`` is the same on every stage: the hyperparameters of the
    user's groups (every stage keeps every group, stepped alike) with ``params`` naming the
    whole model's parameters of each group (``whole_groups``, recorded before the strategy
    pruned the other stages' parameters), so every rank writes the same value under the
    same key. On load each group takes the names this stage holds.

    Checkpoints of accel-parallel 0.3.6 and older nested each stage's state under
    ``pp<rank>``: they still load at the stage split that saved them."""

    def __init__(self, pipeline: PipelinedModel, optimizer: torch.optim.Optimizer,
                 whole_groups: list[list[str]] | None = None) -> None:
        self.pipeline = pipeline
        self.optimizer = optimizer
        self.whole_groups = whole_groups
        self.key = f"pp{pipeline.topology.pp_rank}"  # the 0.3.6 layout's key
        #: this stage's parameter names per group, from the last state_dict()
        self._own_groups: list[list[str]] | None = None

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(self.pipeline.module, self.optimizer)
        self._own_groups = [list(g["params"]) for g in state["param_groups"]]
        if self.whole_groups is not None:
            for group, names in zip(state["param_groups"], self.whole_groups, strict=True):
                group["params"] = list(names)
        return state

    def state_dict_to_load(self, saved: set[str], name: str) -> dict[str, Any]:
        """What to read, given the keys the checkpoint holds (``saved``, DCP's flat names;
        ``name`` is this entry's): the 0.3.6 layout's own stage, else :meth:`state_dict`."""
        if any(k.startswith(f"{name}.state.") for k in saved) or \
                not any(k.startswith(f"{name}.pp") for k in saved):
            return self.state_dict()
        if not any(k.startswith(f"{name}.{self.key}.") for k in saved):
            from accel_state import ConfigurationError

            raise ConfigurationError(
                f"The checkpoint's {name!r} was saved by accel-parallel 0.3.6 or older, "
                f"whose pipeline optimizer state holds no {self.key!r} (pipeline rank "
                f"{self.pipeline.topology.pp_rank}): load it with the pipeline size and "
                "stage split that saved it, then save again to get a checkpoint that loads "
                "at any split.")
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return {self.key: get_optimizer_state_dict(self.pipeline.module, self.optimizer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        if self.key in state and "state" not in state:  # the 0.3.6 layout
            state = state[self.key]
        else:  # each group keeps the parameters of this stage, whatever the saved ones were
            own = self._own_groups
            if own is None:
                from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

                own = [list(g["params"]) for g in get_optimizer_state_dict(
                    self.pipeline.module, self.optimizer)["param_groups"]]
            saved = state["param_groups"]
            if len(saved) != len(own):
                from accel_state import ConfigurationError

                raise ConfigurationError(
                    f"The checkpoint's optimizer has {len(saved)} parameter group(s), this "
                    f"one {len(own)}: build the optimizer with the same groups as the run "
                    "that saved it.")
            groups = [dict(g, params=names) for g, names in zip(saved, own, strict=True)]
            state = {"state": state["state"], "param_groups": groups}
        set_optimizer_state_dict(self.pipeline.module, self.optimizer, state)


class PipelineCheckpointWriter:
    """The ``"sharded"`` writer for this rank's stages, plus the whole-model state dict."""

    layout = _SHARDED

    def __init__(self, pipelines: list[PipelinedModel], dp_rank: int,
                 whole_groups: Mapping[int, list[list[str]]] | None = None) -> None:
        self._inner = _sharded_writer()
        #: id(torch optimizer) -> its groups' parameter names in the whole model
        self._whole_groups = whole_groups or {}
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
                inner = getattr(obj, "optimizer", obj)
                obj = StageOptimizer(self._owner(obj), obj, self._whole_groups.get(id(inner)))
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

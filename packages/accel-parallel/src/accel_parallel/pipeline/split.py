"""Split a model into pipeline stages along its ``ModuleList`` of blocks.

A stage is a *shell* of the user's model: a shallow copy of the model (and of each module
on the path down to the block list) whose block list holds only the stage's blocks, under
their original indices, and whose other children with parameters are kept on the first
stage when registered before the block list (the embedding) and on the last stage when
registered after it (final norm, head), and are ``Identity`` elsewhere; children without
parameters (rotary embeddings, activations) stay on every stage. The model's own
``forward`` then runs one stage: on a middle stage the embedding passes the hidden states
through and the loop visits only that stage's blocks. Parameter names do not change
(``layers.5.attn.q_proj.weight`` stays that), so optimizers, checkpoints and
``get_state_dict`` see the names of the whole model.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

from accel_state import ConfigurationError
from torch import nn

__all__ = ["StagePlan", "find_layers", "plan_stages", "build_shell", "merge_shells"]


@dataclass(frozen=True)
class StagePlan:
    """Which blocks each stage holds: ``stage_keys[s]`` are the block list's keys of stage
    ``s``; ``path`` is the dotted path of the block list in the model."""

    path: str
    stage_keys: tuple[tuple[str, ...], ...]

    @property
    def num_stages(self) -> int:
        return len(self.stage_keys)


def _has_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def find_layers(model: nn.Module, path: str | None = None) -> str:
    """The dotted path of the model's block list: ``path`` when given (it must name a
    ``ModuleList``), else the ``ModuleList`` with the most parameters."""
    name = type(model).__name__
    if path is not None:
        try:
            found = model.get_submodule(path)
        except AttributeError:
            found = None
        if not isinstance(found, nn.ModuleList):
            raise ConfigurationError(
                f"PipelineParallelConfig(layers={path!r}) does not name a ModuleList of {name} "
                f"(found {type(found).__name__ if found is not None else 'nothing'}); give the "
                "dotted path of its list of blocks, e.g. 'model.layers'.")
        return path
    lists = [(sum(p.numel() for p in m.parameters()), n) for n, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) > 0 and n]
    if not lists:
        raise ConfigurationError(
            f"Pipeline parallelism cannot split {name}: it has no ModuleList of blocks (the "
            "per-layer split cuts such a list into stages). Keep the repeated blocks of the "
            "model in an nn.ModuleList attribute (as transformers' models do), or run it "
            "with pp_size=1.")
    return max(lists, key=lambda item: item[0])[1]


def _check_path(model: nn.Module, path: str) -> None:
    """Every module on the way to the block list must hold no parameter of its own and run
    its children in registration order (which the split cannot check, only document)."""
    module = model
    for part in path.split("."):
        if module._parameters and any(p is not None for p in module._parameters.values()):
            own = ", ".join(k for k, v in module._parameters.items() if v is not None)
            raise ConfigurationError(
                f"Pipeline parallelism cannot split {type(model).__name__}: "
                f"{type(module).__name__} on the path to {path!r} holds parameters of its own "
                f"({own}), which no single stage can own. Move them into a submodule.")
        module = module._modules[part]


def plan_stages(model: nn.Module, num_stages: int, *, path: str | None = None,
                split_points: list[str] | None = None) -> StagePlan:
    """Assign the blocks to ``num_stages`` stages: evenly (earlier stages take one more
    when they do not divide), or starting a stage at each name of ``split_points``."""
    path = find_layers(model, path)
    _check_path(model, path)
    layers = model.get_submodule(path)
    keys = list(layers._modules)
    name = type(model).__name__
    if len(keys) < num_stages:
        raise ConfigurationError(
            f"{name} has {len(keys)} block(s) in {path!r}, fewer than the {num_stages} "
            "pipeline stages (pp_size * stages_per_rank); lower pp_size or stages_per_rank.")
    if split_points is None:
        base, extra = divmod(len(keys), num_stages)
        bounds = [0]
        for stage in range(num_stages):
            bounds.append(bounds[-1] + base + (1 if stage < extra else 0))
    else:
        bounds = _bounds_from_points(path, keys, split_points, num_stages, name)
    stage_keys = tuple(tuple(keys[bounds[s]:bounds[s + 1]]) for s in range(num_stages))
    return StagePlan(path=path, stage_keys=stage_keys)


def _bounds_from_points(path: str, keys: list[str], points: list[str], num_stages: int,
                        name: str) -> list[int]:
    if len(points) != num_stages - 1:
        raise ConfigurationError(
            f"PipelineParallelConfig(split_points={points!r}) names {len(points)} split "
            f"point(s); {num_stages} stages need {num_stages - 1} (one per stage after the "
            "first), e.g. [" + ", ".join(repr(f"{path}.{keys[len(keys) * s // num_stages]}")
                                         for s in range(1, num_stages)) + "].")
    bounds = [0]
    for point in points:
        prefix, _, key = point.rpartition(".")
        if prefix != path or key not in keys:
            raise ConfigurationError(
                f"Split point {point!r} is not a block of {name}: name one of "
                f"{path}.{keys[1]} ... {path}.{keys[-1]}.")
        index = keys.index(key)
        if index <= bounds[-1]:
            raise ConfigurationError(
                f"Split points {points!r} must be increasing blocks after the first "
                f"({path}.{keys[0]}): each stage needs at least one block.")
        bounds.append(index)
    bounds.append(len(keys))
    return bounds


def _shallow(module: nn.Module) -> nn.Module:
    """A copy of ``module`` sharing its parameters, buffers and children, with child and
    parameter tables of its own (so the copy's children can be replaced)."""
    shell = copy.copy(module)
    shell._modules = OrderedDict(module._modules)
    shell._parameters = OrderedDict(module._parameters)
    shell._buffers = OrderedDict(module._buffers)
    return shell


def build_shell(model: nn.Module, path: str, keys: tuple[str, ...], *, first: bool,
                last: bool) -> nn.Module:
    """The shell of ``model`` holding the blocks ``keys`` of the list at ``path``; the
    children before the list are kept when ``first``, those after it when ``last``."""
    head, _, rest = path.partition(".")
    shell = _shallow(model)
    names = list(shell._modules)
    position = names.index(head)
    for index, child_name in enumerate(names):
        child = shell._modules[child_name]
        if index == position or child is None or not _has_parameters(child):
            continue
        keep = first if index < position else last
        if not keep:
            shell._modules[child_name] = nn.Identity()
    child = shell._modules[head]
    if rest:
        shell._modules[head] = build_shell(child, rest, keys, first=first, last=last)
    else:
        blocks = nn.ModuleList()
        blocks._modules = OrderedDict((k, child._modules[k]) for k in keys)
        shell._modules[head] = blocks
    return shell


def merge_shells(model: nn.Module, path: str,
                 shells: list[tuple[nn.Module, bool, bool]]) -> nn.Module:
    """One shell with every module of this rank's prepared stage shells (``(shell, first,
    last)``), under the original names: what checkpoints and the optimizer see. Children are
    taken from the prepared shells, so a module a preparation step replaced is the one
    held here too."""
    head, _, rest = path.partition(".")
    local = _shallow(model)
    names = list(model._modules)
    position = names.index(head)
    for index, child_name in enumerate(names):
        if index == position:
            continue
        owner = next((shell for shell, first, last in shells
                      if (first if index < position else last)), None)
        original = model._modules[child_name]
        if owner is not None:
            local._modules[child_name] = owner._modules[child_name]
        elif original is not None and _has_parameters(original):
            local._modules[child_name] = nn.Identity()
        else:
            local._modules[child_name] = shells[0][0]._modules[child_name]
    inner = [(shell._modules[head], first, last) for shell, first, last in shells]
    if rest:
        local._modules[head] = merge_shells(model._modules[head], rest, inner)
    else:
        held = {k: m for shell, _, _ in inner for k, m in shell._modules.items()}
        blocks = nn.ModuleList()
        blocks._modules = OrderedDict((k, held[k]) for k in model._modules[head]._modules
                                      if k in held)
        local._modules[head] = blocks
    return local

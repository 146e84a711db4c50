"""Tensor-parallel plans: which module gets which ``ParallelStyle``.

A plan maps module-name patterns to styles, in the form transformers models carry
(``model._tp_plan``, ``model.config.base_model_tp_plan``): ``"layers.*.mlp.up_proj":
"colwise"``, where ``*`` stands for one name component (a layer index). The style is one
of the names in :data:`STYLE_NAMES` or a torch ``ParallelStyle`` object. The user's plan
(``TorchTensorParallelConfig(tp_plan=...)``) wins over the model's own.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from accel_state import ConfigurationError

__all__ = ["STYLE_NAMES", "make_style", "model_tp_plan", "resolve_tp_plan", "get_model_tp_size"]

#: Style names accel understands (transformers' spellings), and what each one does.
STYLE_NAMES = {
    "colwise": "shard the output features (Linear) / embedding dim; output stays sharded",
    "rowwise": "shard the input features; input sharded, output all-reduced (replicated)",
    "colwise_rep": "colwise, then all-gather the output (replicated)",
    "colwise_gather_output": "same as colwise_rep",
    "rowwise_rep": "rowwise on a replicated input (each rank takes its slice)",
    "embedding_rowwise": "rowwise for nn.Embedding: vocabulary sharded, output replicated",
    "sequence_parallel": "norms/dropout computed on a sequence shard (SequenceParallel)",
    "replicate": "parameters replicated as DTensors on the tp mesh (no sharding)",
}


def make_style(style: Any, where: str = "tp_plan") -> Any:
    """The torch ``ParallelStyle`` for ``style`` (a name of :data:`STYLE_NAMES` or a style
    object, returned as is). An unknown name is an error listing the valid ones."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        SequenceParallel,
    )

    if isinstance(style, ParallelStyle):
        return style
    name = style.strip().lower() if isinstance(style, str) else None
    if name in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if name in ("rowwise_rep", "embedding_rowwise"):
        return RowwiseParallel(input_layouts=Replicate())
    if name == "replicate":
        from accel_parallel.mesh.tp_styles import ReplicateParallel

        return ReplicateParallel()
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel,
              "sequence_parallel": SequenceParallel}
    if name not in styles:
        raise ConfigurationError(
            f"{where}: unknown tensor-parallel style {style!r}; use one of "
            f"{', '.join(STYLE_NAMES)} or a torch.distributed.tensor.parallel.ParallelStyle.")
    return styles[name]()


def _dict_plan(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) and value else None


def model_tp_plan(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's own plan, transformers' way: ``model._tp_plan`` (full module paths), a
    ``tp_plan`` dict attribute, else ``model.config.base_model_tp_plan`` (paths inside the
    base model, prefixed with ``model.base_model_prefix`` when the model wraps it)."""
    for attribute in ("_tp_plan", "tp_plan"):
        plan = _dict_plan(getattr(model, attribute, None))
        if plan:
            return plan
    plan = _dict_plan(getattr(getattr(model, "config", None), "base_model_tp_plan", None))
    if plan is None:
        return None
    prefix = getattr(model, "base_model_prefix", "") or ""
    if prefix and isinstance(getattr(model, prefix, None), torch.nn.Module):
        return {f"{prefix}.{key}": value for key, value in plan.items()}
    return plan


def get_model_tp_size(model: torch.nn.Module) -> int | None:
    """The tensor-parallel degree transformers sharded ``model`` with, else None: the
    model's ``tp_size`` (transformers < 5), else its config's ``distributed_config.tp_size``
    (transformers >= 5, an object or a dict)."""
    size = getattr(model, "tp_size", None)
    if size is not None:
        return size
    config = getattr(getattr(model, "config", None), "distributed_config", None)
    return config.get("tp_size") if isinstance(config, dict) else getattr(config, "tp_size", None)


def _pattern(key: str) -> re.Pattern[str]:
    parts = [r"[^.]+" if part == "*" else re.escape(part) for part in key.split(".")]
    return re.compile(r"\.".join(parts))


def resolve_tp_plan(model: torch.nn.Module, plan: Mapping[str, Any] | None
                    ) -> dict[str, Any]:
    """``{module path: ParallelStyle}`` for every module of ``model`` a plan entry matches
    (``plan``, else the model's own). No plan at all, or one that matches no module, is an
    error that says how to give one; entries matching nothing are reported in a warning."""
    source = "TorchTensorParallelConfig(tp_plan=...)"
    if plan is None:
        plan, source = model_tp_plan(model), f"{type(model).__name__}._tp_plan"
    if not plan:
        raise ConfigurationError(
            f"tp_size > 1 needs a tensor-parallel plan, and {type(model).__name__} has none "
            "(no _tp_plan / config.base_model_tp_plan). Give one: ParallelismConfig(tp_size=N, "
            "tp_handler=TorchTensorParallelConfig(tp_plan={'layers.*.up': 'colwise', "
            "'layers.*.down': 'rowwise'})), or set model._tp_plan to such a dict. Styles: "
            f"{', '.join(STYLE_NAMES)}.")
    names = [name for name, _ in model.named_modules() if name]
    resolved: dict[str, Any] = {}
    unmatched = []
    for key, style in plan.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"{source}: key {key!r} is not a module-name pattern.")
        parallel_style = make_style(style, f"{source}[{key!r}]")
        matcher = _pattern(key)
        hits = [name for name in names if matcher.fullmatch(name)]
        if not hits:
            unmatched.append(key)
        for name in hits:
            resolved[name] = parallel_style
    if not resolved:
        raise ConfigurationError(
            f"{source} matches no module of {type(model).__name__} (patterns: "
            f"{', '.join(map(repr, plan))}; its modules include "
            f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}). Use module paths as "
            "model.named_modules() gives them, with * for one component.")
    if unmatched:
        warnings.warn(f"{source}: no module matches {', '.join(map(repr, unmatched))}; those "
                      "entries are skipped.", UserWarning, stacklevel=3)
    return resolved

"""Putting loaded states into the caller's objects: a refused load changes nothing.

Every state is read and verified before this runs. :func:`apply_states` then checks, for
all objects at once and before touching any, what is certain to fail:

- a model (an ``nn.Module``, or a wrapper with ``checked_module() -> (module, strict)``):
  a tensor whose shape differs from the model's, and with ``strict`` a missing or an
  unexpected key — for the parts of the model torch loads its default way (a submodule
  with its own ``_load_from_state_dict`` or load hooks, e.g. BatchNorm, decides for its
  own keys). dtypes are not compared: ``load_state_dict`` casts, as in Accelerate;
- an optimizer: the number of parameter groups and of parameters in each (torch's own
  checks, made here for every optimizer before the first one is loaded).

Any such problem is refused with one ``CheckpointError`` listing them all. Objects that
cannot be checked in advance (schedulers, dataloaders, the scaler, registered objects)
are loaded first, each after a copy of its state is kept: if one raises, those loaded
before it get their copies back and the error goes on. Models and optimizers come last.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from accel_checkpoint.errors import CheckpointError

__all__ = ["state_problem", "refuse_misfits", "apply_states", "copies_into_place"]

_SHOWN = 5


def _module_of(obj: Any) -> tuple[nn.Module, bool] | None:
    if isinstance(obj, nn.Module):
        return obj, True
    checked = getattr(obj, "checked_module", None)
    return checked() if callable(checked) else None


def copies_into_place(obj: Any) -> bool:
    """Whether ``obj.load_state_dict`` copies the loaded tensors into its own (a model
    does), so the loaded ones may view a file's mapping; anything else may keep them."""
    return _module_of(obj) is not None


def _own_loaders(module: nn.Module) -> list[str]:
    """Prefixes of the submodules that load their keys their own way (hooks, overrides)."""
    found = []
    for name, sub in module.named_modules():
        overridden = type(sub)._load_from_state_dict is not nn.Module._load_from_state_dict
        hooked = bool(getattr(sub, "_load_state_dict_pre_hooks", None)
                      or getattr(sub, "_load_state_dict_post_hooks", None))
        if overridden or hooked:
            found.append(f"{name}." if name else "")
    return found


def _show(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def _module_problem(module: nn.Module, state: Any, strict: bool) -> str | None:
    if not isinstance(state, dict):
        return f"the saved state is a {type(state).__name__}, not a state dict"
    own = module.state_dict()
    skip = _own_loaders(module)
    if "" in skip:  # the model itself loads its own way: leave every key to it
        return None

    def default(key: str) -> bool:
        return not any(key.startswith(prefix) for prefix in skip)

    shapes = [f"{k} {tuple(state[k].shape)} (the model has {tuple(own[k].shape)})"
              for k in own if k in state and default(k) and isinstance(state[k], torch.Tensor)
              and isinstance(own[k], torch.Tensor) and state[k].shape != own[k].shape]
    problems = [f"shape mismatch: {_show(shapes)}"] if shapes else []
    if strict:
        missing = sorted(k for k in own if k not in state and default(k))
        unexpected = sorted(k for k in state if k not in own and default(k))
        if missing:
            problems.append(f"missing keys {_show(missing)}")
        if unexpected:
            problems.append(f"unexpected keys {_show(unexpected)}")
    return "; ".join(problems) or None


def _optimizer_problem(optimizer: torch.optim.Optimizer, state: Any) -> str | None:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list):
        return "the saved state has no param_groups"
    own = optimizer.param_groups
    if len(groups) != len(own):
        return f"{len(groups)} parameter group(s) saved, the optimizer has {len(own)}"
    sizes = [(len(g.get("params", ())), len(o["params"])) for g, o in zip(groups, own)]
    if any(saved != have for saved, have in sizes):
        return (f"parameters per group saved {[s for s, _ in sizes]}, the optimizer has "
                f"{[h for _, h in sizes]}")
    return None


def state_problem(obj: Any, state: Any) -> str | None:
    """Why loading ``state`` into ``obj`` is certain to fail (``None``: no known reason)."""
    module = _module_of(obj)
    if module is not None:
        return _module_problem(module[0], state, module[1])
    if isinstance(obj, torch.optim.Optimizer):
        return _optimizer_problem(obj, state)
    return None


def _checked(obj: Any) -> bool:
    return _module_of(obj) is not None or isinstance(obj, torch.optim.Optimizer)


def refuse_misfits(path: str | os.PathLike[str], pairs: Sequence[tuple[str, Any, Any]]) -> None:
    """Raise one ``CheckpointError`` listing every ``(name, object, state)`` whose state is
    certain not to fit its object; change nothing."""
    problems = [f"{name}: {problem}" for name, obj, state in pairs
                if (problem := state_problem(obj, state)) is not None]
    if problems:
        raise CheckpointError(
            f"{path} does not fit the objects it is loaded into, so nothing was loaded: "
            f"{' | '.join(problems)}. Prepare the same models and optimizers (same "
            "architecture, same parameter groups) as the run that saved it (keys alone: "
            "load_state(..., strict=False) loads the model's matching keys).")


def apply_states(path: str | os.PathLike[str], pairs: Sequence[tuple[str, Any, Any]]) -> None:
    """Load each ``(name, object, state)``; refuse up front what is certain to fail (one
    error listing every problem, nothing changed), restore the unchecked objects already
    loaded if a later one raises (see the module docstring)."""
    refuse_misfits(path, pairs)
    unchecked = [p for p in pairs if not _checked(p[1])]
    done: list[tuple[Any, Any]] = []
    try:
        for _, obj, state in unchecked:
            backup = copy.deepcopy(obj.state_dict())
            obj.load_state_dict(state)
            done.append((obj, backup))
    except BaseException:
        for obj, backup in reversed(done):
            obj.load_state_dict(backup)
        raise
    for _, obj, state in pairs:
        if _checked(obj):
            obj.load_state_dict(state)

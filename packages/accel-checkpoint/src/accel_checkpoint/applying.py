"""Putting loaded states into the caller's objects: a refused load changes nothing.

Every state is read and verified before this runs. :func:`apply_states` then checks, for
all objects at once and before touching any, what is certain to fail:

- a model (an ``nn.Module``, or a wrapper with ``checked_module() -> (module, strict)``):
  a tensor whose shape differs from the model's (or a value that is no tensor), and with
  ``strict`` a missing or an unexpected key — for the parts of the model torch loads its
  default way (a submodule with its own ``_load_from_state_dict``, load hooks or extra
  state decides for its own keys; BatchNorm's own loader is torch's default plus a
  ``num_batches_tracked`` it may fill in, and is checked). dtypes are not compared:
  ``load_state_dict`` casts, as in Accelerate;
- an optimizer: the number of parameter groups and of parameters in each (torch's own
  checks, made here for every optimizer before the first one is loaded).

Any such problem is refused with one ``CheckpointError`` listing them all. What cannot be
checked in advance loads first, each object kept just before it changes
(:mod:`accel_checkpoint.rollback`): schedulers, dataloaders, the scaler, registered
objects, then the RNG states, the optimizers (kept without a copy), the models that load
some keys their own way (kept as a CPU copy). If any raises, everything loaded before it
is put back and the error goes on. The models checked in full load last, unkept: a model
whose every key loads torch's default way and passed the checks cannot fail to load (in a
load the ranks agree on, they agree before these: ``rollback.settle_agreement``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.rollback import all_or_nothing, module_of, settle_agreement

__all__ = ["state_problem", "refuse_misfits", "apply_states", "copies_into_place",
           "loads_certainly"]

_SHOWN = 5


def copies_into_place(obj: Any) -> bool:
    """Whether ``obj.load_state_dict`` copies the loaded tensors into its own (a model
    does), so the loaded ones may view a file's mapping; anything else may keep them."""
    return module_of(obj) is not None


#: torch's own loaders that are its default one plus a filled-in key (checked as default)
_DEFAULT_LIKE = (nn.modules.batchnorm._NormBase._load_from_state_dict,
                 nn.Module._load_from_state_dict)
_FILLED_IN = "num_batches_tracked"  # BatchNorm loads a state without it (as 0 / unchanged)


def _loads_own_way(sub: nn.Module) -> bool:
    """Whether ``sub`` loads its keys by code of its own (an override, hooks, extra state)."""
    kind = type(sub)
    return (kind._load_from_state_dict not in _DEFAULT_LIKE
            or kind.set_extra_state is not nn.Module.set_extra_state
            or bool(getattr(sub, "_load_state_dict_pre_hooks", None)
                    or getattr(sub, "_load_state_dict_post_hooks", None)))


def _own_loaders(module: nn.Module) -> list[str]:
    """Prefixes of the submodules that load their keys their own way (hooks, overrides)."""
    return [f"{name}." if name else "" for name, sub in module.named_modules()
            if _loads_own_way(sub)]


def loads_certainly(obj: Any) -> bool:
    """Whether the model ``obj``, its state checked by :func:`state_problem`, is certain to
    load: every key loads torch's default way (its shapes and keys were checked)."""
    found = module_of(obj)
    if found is None:
        return False
    module = found[0]
    return (type(module).load_state_dict is nn.Module.load_state_dict
            and not _own_loaders(module))


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
    odd = [f"{k} ({type(state[k]).__name__})" for k in own if k in state and default(k)
           and isinstance(own[k], torch.Tensor) and not isinstance(state[k], torch.Tensor)]
    if odd:
        problems.append(f"not tensors: {_show(odd)}")
    if strict:
        missing = sorted(k for k in own if k not in state and default(k)
                         and not _filled_in(module, k))
        unexpected = sorted(k for k in state if k not in own and default(k))
        if missing:
            problems.append(f"missing keys {_show(missing)}")
        if unexpected:
            problems.append(f"unexpected keys {_show(unexpected)}")
    return "; ".join(problems) or None


def _filled_in(module: nn.Module, key: str) -> bool:
    """A BatchNorm's ``num_batches_tracked``, which its loader fills in when absent."""
    owner, _, leaf = key.rpartition(".")
    if leaf != _FILLED_IN:
        return False
    sub = module.get_submodule(owner) if owner else module
    return isinstance(sub, nn.modules.batchnorm._NormBase)


def _optimizer_problem(optimizer: torch.optim.Optimizer, state: Any) -> str | None:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list):
        return "the saved state has no param_groups"
    own = optimizer.param_groups
    if len(groups) != len(own):
        return f"{len(groups)} parameter group(s) saved, the optimizer has {len(own)}"
    sizes = [(len(g.get("params", ())), len(o["params"])) for g, o in zip(groups, own, strict=True)]
    if any(saved != have for saved, have in sizes):
        return (f"parameters per group saved {[s for s, _ in sizes]}, the optimizer has "
                f"{[h for _, h in sizes]}")
    return None


def state_problem(obj: Any, state: Any) -> str | None:
    """Why loading ``state`` into ``obj`` is certain to fail (``None``: no known reason)."""
    module = module_of(obj)
    if module is not None:
        return _module_problem(module[0], state, module[1])
    if isinstance(obj, torch.optim.Optimizer):
        return _optimizer_problem(obj, state)
    return None


def _checked(obj: Any) -> bool:
    return module_of(obj) is not None or isinstance(obj, torch.optim.Optimizer)


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


def apply_states(path: str | os.PathLike[str], pairs: Sequence[tuple[str, Any, Any]],
                 rng_state: Any = None,
                 restore_rng: Callable[[Any], None] | None = None) -> None:
    """Load each ``(name, object, state)`` and ``rng_state`` (this process's RNG states,
    when given; put in place by ``restore_rng``, default ``restore_rng_state``): refuse up
    front what is certain to fail (one error listing every problem, nothing changed); if a
    load raises, put back what was loaded before it (see the module docstring) and raise
    its error."""
    from accel_state.random import restore_rng_state

    restore_rng = restore_rng if restore_rng is not None else restore_rng_state
    refuse_misfits(path, pairs)
    models = [(obj, state) for _, obj, state in pairs if module_of(obj) is not None]
    optimizers = [(obj, state) for _, obj, state in pairs
                  if isinstance(obj, torch.optim.Optimizer)]
    rest = [(obj, state) for _, obj, state in pairs if not _checked(obj)]
    certain = [(obj, state) for obj, state in models if loads_certainly(obj)]
    uncertain = [(obj, state) for obj, state in models if not loads_certainly(obj)]
    with all_or_nothing() as rollback:
        for obj, state in rest:
            rollback.keep(obj)
            obj.load_state_dict(state)
        if rng_state is not None:
            rollback.keep_rng()
            restore_rng(rng_state)
        for obj, state in optimizers + uncertain:
            rollback.keep(obj)
            obj.load_state_dict(state)
        if certain:  # the ranks agree first: another rank's failure could not undo these
            settle_agreement()
        for obj, state in certain:  # checked in full: they cannot fail, so they go last
            obj.load_state_dict(state)

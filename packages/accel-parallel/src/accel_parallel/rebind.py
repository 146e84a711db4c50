"""Re-bind an optimizer built before ``prepare`` to the parameters a strategy put in place.

Sharding (FSDP2's ``fully_shard``, tensor parallelism) replaces a module's parameters by
new ``Parameter`` objects. A user who built the optimizer first (as Accelerate's examples
do) would otherwise step the old, orphaned tensors. Parameters are matched by their name
in the unwrapped model, which preparation does not change.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["parameter_moves", "rebind_optimizer"]


def parameter_moves(before: list[dict[str, torch.nn.Parameter]],
                    after: list[dict[str, torch.nn.Parameter]]) -> dict[int, torch.nn.Parameter]:
    """``id(old parameter) -> new parameter`` for every parameter a model's preparation
    replaced (same name, other object); empty when none was (the usual case)."""
    moves: dict[int, torch.nn.Parameter] = {}
    for old_named, new_named in zip(before, after, strict=True):
        for name, old in old_named.items():
            new = new_named.get(name)
            if new is not None and new is not old:
                moves[id(old)] = new
    return moves


def rebind_optimizer(optimizer: torch.optim.Optimizer,
                     moves: dict[int, torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Point ``optimizer``'s parameter groups (and per-parameter state) at the new parameters.

    State already held for an old parameter (an optimizer that stepped before ``prepare``)
    moves with it. The optimizer object itself is kept, so references to it stay valid.
    """
    for group in optimizer.param_groups:
        group["params"] = [moves.get(id(p), p) for p in group["params"]]
    state: Any = optimizer.state
    for old in [p for p in state if id(p) in moves]:
        state[moves[id(old)]] = state.pop(old)
    return optimizer

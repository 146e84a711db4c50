"""Accelerate's FSDP helpers (``accelerate.utils.fsdp_utils``) over what the FSDP2
strategy already does inside ``prepare``: switching rank-0-only weight loading on and off,
parameter names without the wrapper prefixes activation checkpointing and ``torch.compile``
insert, and the FSDP2 building blocks (wrap policy, activation checkpointing, sharding one
model, loading a full state dict into the shards, re-pointing an optimizer, weight re-tying).

Each is a thin public entry to one step of
:class:`~accel_parallel.fsdp.strategy.FSDP2Strategy`, so a script that assembles FSDP2 by hand as Accelerate's building blocks allow gets the same
sharding, checkpointing and loading as ``Accelerator.prepare``. Functions that need the
strategy take the accelerator and use ``accelerator.strategy``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
from accel_state import ConfigurationError, env

from accel_parallel.compile import compile_regions
from accel_parallel.rebind import rebind_optimizer

__all__ = ["compile_regions_fsdp2", "disable_fsdp_ram_efficient_loading",
           "enable_fsdp_ram_efficient_loading", "ensure_weights_retied", "fsdp2_apply_ac",
           "fsdp2_canonicalize_names", "fsdp2_load_full_state_dict",
           "fsdp2_prepare_auto_wrap_policy", "fsdp2_prepare_model",
           "fsdp2_switch_optimizer_parameters", "get_module_class_from_name",
           "get_parameters_from_modules"]

_WRAPPER_PARTS = ("_checkpoint_wrapped_module", "_orig_mod")


def enable_fsdp_ram_efficient_loading() -> None:
    """Turn on rank-0-only loading of pretrained weights (``FSDP_CPU_RAM_EFFICIENT_LOADING``)
    and FSDP itself when nothing chose a strategy yet, for the ``from_pretrained`` that follows."""
    if not env.USE_FSDP.is_set():
        env.USE_FSDP.set("true")
    env.FSDP_CPU_RAM_EFFICIENT_LOADING.set("true")


def disable_fsdp_ram_efficient_loading() -> None:
    """Turn rank-0-only loading of pretrained weights off again (every rank loads them)."""
    env.FSDP_CPU_RAM_EFFICIENT_LOADING.set("false")


def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> dict[str, Any]:
    """``named_params`` keyed by the names of the unwrapped model: the
    ``_checkpoint_wrapped_module`` and ``_orig_mod`` path parts are dropped."""
    return {".".join(p for p in name.split(".") if p not in _WRAPPER_PARTS): value
            for name, value in named_params.items()}


def get_module_class_from_name(module: torch.nn.Module,
                               name: str) -> type[torch.nn.Module] | None:
    """The class named ``name`` of ``module`` or of its first such submodule (depth first),
    e.g. the transformer block class an FSDP wrap policy names; ``None`` when none is."""
    for sub in module.modules():
        if type(sub).__name__ == name:
            return type(sub)
    return None


def get_parameters_from_modules(modules: Iterable[torch.nn.Module] | str | None,
                                model: torch.nn.Module, device: Any) -> set[torch.nn.Parameter]:
    """The parameters of ``modules`` (e.g. FSDP's ignored modules): modules given as such, or
    a regex that fullmatches names in ``model.named_modules()`` (each match is moved to
    ``device`` first, as it stays unsharded); ``None`` is the empty set."""
    if modules is None:
        return set()
    if isinstance(modules, str):
        pattern = re.compile(modules)
        modules = [m.to(device) for name, m in model.named_modules() if pattern.fullmatch(name)]
    return {p for module in modules for p in module.parameters()}


def _fsdp_strategy(accelerator: Any, caller: str) -> Any:
    """The accelerator's FSDP2 strategy; an error naming what it runs instead."""
    from accel_parallel.mesh.strategy import MeshStrategy

    strategy = getattr(accelerator, "strategy", None)
    if not isinstance(strategy, MeshStrategy):
        raise ConfigurationError(
            f"{caller} needs an accelerator running FSDP, but it runs "
            f"{type(strategy).__name__ if strategy is not None else 'no strategy'}: "
            "create it with Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin()) or "
            "ACCELERATE_USE_FSDP=true.")
    return strategy


def fsdp2_prepare_auto_wrap_policy(fsdp2_plugin: Any, model: torch.nn.Module
                                   ) -> Callable[[torch.nn.Module], bool] | None:
    """``policy(module) -> bool``: True for the submodules the plugin's ``auto_wrap_policy``
    shards as units of their own (as ``prepare`` does); None when it wraps nothing but the
    model (no policy, or ``NO_WRAP``). The choice is made now, on ``model``."""
    if fsdp2_plugin.auto_wrap_policy in (None, "NO_WRAP"):
        return None
    chosen = {id(m) for m in fsdp2_plugin.modules_to_shard(model)}

    def policy(module: torch.nn.Module) -> bool:
        return id(module) in chosen

    return policy


def fsdp2_apply_ac(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Checkpoint activations of the plugin's wrap units (the whole model when it has none),
    in place, as ``prepare`` does with ``activation_checkpointing=True``; returns ``model``.
    Forwards are replaced rather than wrapped, so parameter names do not change."""
    from accel_parallel.fsdp.sharding import apply_activation_checkpointing

    plugin = _fsdp_strategy(accelerator, "fsdp2_apply_ac").plugin
    apply_activation_checkpointing(plugin.modules_to_shard(model) or [model])
    return model


def fsdp2_prepare_model(accelerator: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Shard ``model`` with FSDP2 in place exactly as ``accelerator.prepare`` would (precision,
    placement, activation checkpointing, compile, ``fully_shard`` of the wrap units and the
    root, rank-0 weights broadcast with ``cpu_ram_efficient_loading``); returns it. A model
    already sharded is returned as it is. The optimizer is not touched: see
    :func:`fsdp2_switch_optimizer_parameters`, or let ``prepare`` do both."""
    return _fsdp_strategy(accelerator, "fsdp2_prepare_model").prepare_model(model)


def fsdp2_load_full_state_dict(accelerator: Any, model: torch.nn.Module, full_sd: dict,
                               cpu_offload: bool = False) -> torch.nn.Module:
    """Fill a sharded ``model``'s shards (and buffers) from the main process's full state
    dict, broadcast to every rank (the other ranks' ``full_sd`` is not read and may be empty).
    A model still on the meta device is first given memory for its shards: on the CPU with
    ``cpu_offload``, else on ``accelerator.device``. Returns ``model``."""
    from accel_parallel.fsdp.sharding import broadcast_from_main

    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        model.to_empty(device=torch.device("cpu") if cpu_offload else accelerator.device)
    broadcast_from_main(model, full_sd if accelerator.is_main_process else {})
    return model


def fsdp2_switch_optimizer_parameters(optimizer: torch.optim.Optimizer, mapping: dict,
                                      model_owned_parameter_ids: Iterable[int] = ()) -> None:
    """Point ``optimizer`` (in place) at the parameters that replaced its own: ``mapping`` is
    ``old_param.data_ptr() -> new parameter``. State an optimizer holds for an old parameter
    moves with it. A parameter absent from ``mapping`` is kept, unless its ``id`` is in
    ``model_owned_parameter_ids`` (it was the model's and must have been replaced): KeyError,
    as training it would silently update a tensor the model no longer uses."""
    owned = set(model_owned_parameter_ids)
    moves: dict[int, torch.nn.Parameter] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            new = mapping.get(param.data_ptr())
            if new is not None:
                moves[id(param)] = new
            elif id(param) in owned:
                raise KeyError(
                    f"an optimizer parameter of shape {tuple(param.shape)} belonged to the model "
                    "but has no entry in the mapping (keyed by data_ptr()), so it would not be "
                    "trained: build the mapping from the model's parameters before and after "
                    "preparation.")
    rebind_optimizer(optimizer, moves)


def ensure_weights_retied(param_init_fn: Callable[[torch.nn.Module], Any],
                          model: torch.nn.Module, device: torch.device | str
                          ) -> Callable[[torch.nn.Module], Any]:
    """``param_init_fn`` made to keep the model's tied weights tied (``_tied_weights_keys``):
    an init function that allocates new parameters per module (``to_empty``) would otherwise
    give each tied name its own tensor. The first module to re-create a tied parameter
    defines it; every later holder gets that same parameter. Without tied keys,
    ``param_init_fn`` itself is returned. ``device`` is Accelerate's argument (the init
    function decides placement) and is accepted unused."""
    del device
    keys = getattr(model, "_tied_weights_keys", None)
    if not keys:
        return param_init_fn
    names = [*keys, *keys.values()] if isinstance(keys, dict) else list(keys)
    tied = {id(model.get_parameter(n)) for n in names if _has_parameter(model, n)}
    if not tied:
        return param_init_fn
    shared: dict[int, torch.nn.Parameter] = {}

    def init_keeping_ties(module: torch.nn.Module) -> Any:
        holders = [(name, id(p)) for name, p in module.named_parameters(recurse=False)
                   if id(p) in tied]
        result = param_init_fn(module)
        target = result if isinstance(result, torch.nn.Module) else module
        for name, key in holders:
            if key in shared:
                setattr(target, name, shared[key])
            else:
                shared[key] = getattr(target, name)
        return result

    return init_keeping_ties


def _has_parameter(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_parameter(name)
    except AttributeError:
        return False
    return True


def compile_regions_fsdp2(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """Regional compilation for an FSDP2 model: each repeated block (the whole module when it
    has none) compiled in place with ``nn.Module.compile``, so FSDP2's hooks, parameter names
    and DTensors stay as they are; returns ``module``."""
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError(f"compile_regions_fsdp2({type(module).__name__}) needs an "
                                 "nn.Module (the model prepared with FSDP).")
    return compile_regions(module, **compile_kwargs)

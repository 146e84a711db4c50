"""A ZeRO checkpoint into a DeepSpeed engine on another number of processes.

DeepSpeed refuses ZeRO optimizer state saved by another number of processes (its universal
checkpoint conversion reads every file with ``torch.load(weights_only=False)``, which accel
does not do). accel instead joins the saved partitions into the full fp32 weights and
name-keyed optimizer state (:func:`~accel_parallel.deepspeed.states.read_zero_checkpoint`,
from the hash-checked bytes, through the allow-list unpickler) and cuts them again along the
live engine's own partitions, where DeepSpeed keeps each parameter's piece for this rank:

- ZeRO-1/2: ``param._hp_mapping`` (the piece of the flattened parameter, and where it sits in
  this rank's flat fp32 partition ``single_partition_of_fp32_groups[g]``);
- ZeRO-3: ``grad_position`` (each parameter's offset in this rank's flat fp32 partition
  ``fp32_partitioned_groups_flat[g]``, ``ceil(numel / processes)`` values, the rank's slice).

The fp32 partitions, the optimizer's flat state tensors (``exp_avg``, ``exp_avg_sq``, ...)
and its ``step`` are written there; the 16-bit (or fp32) model weights are the fp32 weights
cast, as DeepSpeed's own step writes them; the optimizer's hyperparameters, its loss scaler,
the scheduler and the engine's step counters come back as DeepSpeed's own load restores them.
No collective is needed except ZeRO-3's re-gather of its persistent parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from accel_state import ConfigurationError

from accel_parallel.deepspeed.states import ZeroCheckpoint

__all__ = ["load_into_engine", "reshape_refusal"]

_COUNTERS = ("global_steps", "global_samples", "skipped_steps")


def reshape_refusal(engine: Any, with_optimizer: bool = True) -> str | None:
    """Why ``engine`` cannot take ZeRO state of another number of processes by
    reshaping, or ``None`` when it can."""
    stage = engine.zero_optimization_stage()
    zero = engine.optimizer
    if stage not in (1, 2, 3):
        return (f"the engine runs ZeRO stage {stage}, which keeps no ZeRO partitions to cut "
                "the state into (prepare it with zero_stage 1, 2 or 3)")
    if _evaluation_zero3(engine, with_optimizer):
        return None
    flats = "fp32_partitioned_groups_flat" if stage == 3 else "single_partition_of_fp32_groups"
    if not hasattr(zero, flats) or not hasattr(zero, "optimizer"):
        return (f"its optimizer ({type(zero).__name__}) is not DeepSpeed's ZeRO optimizer this "
                f"accel knows (DeepSpeed {_version()})")
    if engine.zero_nvme_offload_optimizer() or getattr(zero, "swap_optimizer", False):
        return "its optimizer state is swapped to NVMe (offload_optimizer device 'nvme')"
    if stage == 3 and getattr(zero, "params_in_nvme_and_cpu", False):
        return "its parameters are swapped to NVMe (offload_param device 'nvme')"
    return None


def _evaluation_zero3(engine: Any, with_optimizer: bool) -> bool:
    """A ZeRO-3 engine prepared without an optimizer (only its parameters are partitioned,
    by DeepSpeed's ``DeepSpeedZeRoOffload``) loading weights alone."""
    return (not with_optimizer and engine.zero_optimization_stage() == 3
            and not hasattr(engine.optimizer, "fp32_partitioned_groups_flat"))


def _write_gathered(engine: Any, saved: ZeroCheckpoint) -> None:
    """Weights into a ZeRO-3 engine without fp32 partitions: each parameter gathered, set,
    and partitioned again (DeepSpeed's ``GatheredParameters``; a collective per parameter)."""
    from accel_parallel.deepspeed.runtime import import_deepspeed

    gathered = import_deepspeed().zero.GatheredParameters
    for name, param in engine.module.named_parameters():
        with gathered([param], modifier_rank=0), torch.no_grad():
            param.data.copy_(saved.weights[name].to(param.dtype).reshape(param.shape))


def _version() -> str:
    from importlib.metadata import version

    return version("deepspeed")


def _pieces_12(zero: Any, names: dict[int, str]) -> Iterator[tuple[int, str, list[tuple]]]:
    """ZeRO-1/2: ``(group, name, [(offset in the flat partition, offset in the flattened
    parameter, count)])`` of every parameter with a piece on this rank."""
    for g, group in enumerate(zero.bit16_groups):
        for param in group:
            mapping = getattr(param, "_hp_mapping", None)
            if mapping is not None:
                hp, lp = mapping.hp_fragment_address, mapping.lp_fragment_address
                yield g, names[id(param)], [(hp.start, lp.start, hp.numel)]


def _pieces_3(zero: Any, names: dict[int, str]) -> Iterator[tuple[int, str, list[tuple]]]:
    """ZeRO-3: the same, from each parameter's slot in its group's flat partition."""
    for group in zero.fp16_groups:
        for param in group:
            g, offset, size = zero.grad_position[zero.get_param_id(param)]
            rank = zero._get_param_partition_rank(param)
            count = max(0, min(size, param.ds_numel - size * rank))
            yield g, names[id(param)], [(offset, size * rank, count)] if count else []


def _copy(flat: torch.Tensor, full: torch.Tensor, pieces: list[tuple]) -> None:
    values = full.reshape(-1)
    for dst, src, count in pieces:
        flat.narrow(0, dst, count).copy_(values.narrow(0, src, count))


def _flats(engine: Any) -> list[torch.Tensor]:
    zero = engine.optimizer
    if engine.zero_optimization_stage() == 3:
        return list(zero.fp32_partitioned_groups_flat)
    return list(zero.single_partition_of_fp32_groups)


def _check_names(path: Any, engine: Any, saved: ZeroCheckpoint, strict: bool) -> None:
    params = {n for n, _ in engine.module.named_parameters()}
    missing = sorted(params - saved.weights.keys())
    extra = sorted(saved.weights.keys() - params - {n for n, _ in engine.module.named_buffers()})
    if missing or (strict and extra):
        raise ConfigurationError(
            f"{path} does not fit this engine's model: parameters missing from it "
            f"{missing[:5]}, names it holds that the model lacks {extra[:5]}. Load it into "
            "the model it was saved from.")


def _moment_keys(saved: ZeroCheckpoint, names: list[str]) -> set[str]:
    """The per-element state of a group's parameters (``exp_avg``, ...): tensors shaped as
    their parameter; the rest (``step``) is one value for the whole flat partition."""
    state = saved.optimizer["state"]
    return {key for name in names for key, value in state.get(name, {}).items()
            if isinstance(value, torch.Tensor) and value.dim() > 0
            and value.shape == saved.weights[name].shape}


def _write_optimizer(engine: Any, saved: ZeroCheckpoint, slots: list) -> None:
    zero, base = engine.optimizer, engine.optimizer.optimizer
    groups, state = saved.optimizer["param_groups"], saved.optimizer["state"]
    flats = _flats(engine)
    if len(groups) != len(flats) or len(base.param_groups) != len(flats):
        raise ConfigurationError(
            f"the checkpoint's optimizer has {len(groups)} parameter group(s) where this "
            f"engine's has {len(flats)} partition group(s) and {len(base.param_groups)} "
            "optimizer group(s): build the optimizer with the same parameter groups as the "
            "run that saved it (and keep ZeRO-3's sub_group_size above the group sizes).")
    for g, flat in enumerate(flats):
        moments = _moment_keys(saved, groups[g]["params"])
        held = base.state[flat] if flat in base.state else {}
        for key, value in state.get(groups[g]["params"][0], {}).items():
            if key in moments:
                if key not in held or held[key].shape != flat.shape:
                    held[key] = torch.zeros_like(flat)
            else:
                held[key] = value.clone() if isinstance(value, torch.Tensor) else value
        for group, name, pieces in slots:
            for key in moments if group == g else ():
                _copy(held[key], state[name][key], pieces)
        base.state[flat] = held
        base.param_groups[g].update({k: v for k, v in groups[g].items() if k != "params"})
    for key, value in saved.optimizer_globals.items():
        if hasattr(zero, key):
            setattr(zero, key, value)
    if hasattr(zero, "_hp_optimizer_states_linked"):  # ZeRO-1/2: views into the new state,
        zero._hp_optimizer_states_linked = False  # for safe_get_full_optimizer_state and step
        if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):
            zero._lazy_init_hp_params_optimizer_state()


def _write_partitioned_weight(zero: Any, param: Any, full: torch.Tensor) -> None:
    """ZeRO-3: this rank's slice of ``full`` into the parameter's partition (zero padded)."""
    size = param.ds_tensor.numel()
    start = size * zero._get_param_partition_rank(param)
    count = max(0, min(size, param.ds_numel - start))
    local = param.ds_tensor.data.view(-1)
    local.narrow(0, 0, count).copy_(full.reshape(-1).narrow(0, start, count))
    local.narrow(0, count, size - count).zero_()


def load_into_engine(path: Any, engine: Any, saved: ZeroCheckpoint, *, with_optimizer: bool,
                     with_scheduler: bool = True, strict: bool = True) -> None:
    """Put ``saved`` (joined from any number of processes) into ``engine``'s partitions:
    the fp32 master weights, the model weights, buffers, with ``with_optimizer`` the
    optimizer state, hyperparameters and loss scaler; and, as DeepSpeed's own load does,
    the scheduler and step counters. A ZeRO-3 engine prepared without an optimizer takes
    the weights through ``GatheredParameters``."""
    why = reshape_refusal(engine, with_optimizer)
    if why is not None:
        raise ConfigurationError(f"{path}: accel cannot repartition its ZeRO state onto this "
                                 f"engine: {why}.")
    if with_optimizer and saved.optimizer is None:
        raise ConfigurationError(f"{path} holds no optimizer state to resume the optimizer "
                                 "from: load the model alone.")
    _check_names(path, engine, saved, strict)
    if _evaluation_zero3(engine, with_optimizer):
        _write_gathered(engine, saved)
    else:
        _write_partitions(engine, saved, with_optimizer)
    with torch.no_grad():
        for name, buffer in engine.module.named_buffers():
            if name in saved.weights:
                buffer.copy_(saved.weights[name])
    model = saved.model_file  # what DeepSpeed's load restores unless loading the module only
    if with_scheduler and engine.lr_scheduler is not None and model.get("lr_scheduler"):
        engine.lr_scheduler.load_state_dict(model["lr_scheduler"])
    for key in _COUNTERS:
        if key in model:
            setattr(engine, key, model[key])
    engine.loaded_checkpoint_dp_world_size = model.get("dp_world_size")


def _write_partitions(engine: Any, saved: ZeroCheckpoint, with_optimizer: bool) -> None:
    """The fp32 partitions, model weights and (``with_optimizer``) optimizer state."""
    zero = engine.optimizer
    stage3 = engine.zero_optimization_stage() == 3
    names = {id(p): n for n, p in engine.module.named_parameters()}
    if stage3 and hasattr(zero, "checkpoint_event_prologue"):
        zero.checkpoint_event_prologue()  # every parameter back to its partition
    slots = list((_pieces_3 if stage3 else _pieces_12)(zero, names))
    flats = _flats(engine)
    with torch.no_grad():
        for g, name, pieces in slots:
            _copy(flats[g], saved.weights[name], pieces)
        for name, param in engine.module.named_parameters():
            full = saved.weights[name].to(param.dtype)
            if stage3:
                _write_partitioned_weight(zero, param, full)
            else:
                param.copy_(full.reshape(param.shape))
        if with_optimizer:
            _write_optimizer(engine, saved, slots)
    if stage3 and hasattr(zero, "checkpoint_event_epilogue"):
        zero.checkpoint_event_epilogue()  # persistent parameters gathered again

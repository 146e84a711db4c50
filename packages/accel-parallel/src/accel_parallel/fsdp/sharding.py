"""What FSDP2 (``torch.distributed.fsdp.fully_shard``) does to a model, as functions the
mesh strategy's data-parallel step calls (:mod:`accel_parallel.mesh.strategy`): the mixed-precision
policy, ``fully_shard`` of the wrap units and the root, activation checkpointing, the rank-0
weights broadcast, the gradient-sync switches of accumulation, and the mesh sizes an FSDP
plugin implies. No strategy class lives here, so the mesh strategy and the FSDP2 preset
(:mod:`accel_parallel.fsdp.strategy`) both import it without importing each other.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError
from accel_state.imports import is_torch_version

from accel_parallel.fsdp.torch_fsdp import fsdp2

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import PartialState

    from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_parallel.mesh.parallelism_config import ParallelismConfig

__all__ = ["CheckpointedForward", "apply_activation_checkpointing", "plugin_parallelism",
           "adapt_precision", "ensure_process_group", "broadcast_from_main", "shard_model",
           "weights_to_broadcast", "without_gradient_sync", "with_gradient_sync"]


class CheckpointedForward:
    """A module's forward recomputed in backward (activation checkpointing).

    The forward is replaced in place rather than wrapped in another module, so parameter
    names (and so optimizers, checkpoints and sharding plans) do not change.
    """

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


def adapt_precision(precision: Precision) -> None:
    """Tell the precision its parameters are sharded (:meth:`Precision.adapt_to_sharding`).

    Loss scaling must agree over every process, as each rank sees inf/nan in its own
    gradient shards only: a scaling precision without that hook is an error, and so is a
    torch whose GradScaler cannot unscale DTensor gradients (before 2.5)."""
    if precision.scaler is not None:
        if is_torch_version("<", "2.5"):
            raise ConfigurationError(
                f"mixed_precision={precision.name!r} with FSDP2 needs torch>=2.5, whose "
                f"GradScaler unscales DTensor gradients; this is torch {torch.__version__}. "
                "Upgrade torch, or use mixed_precision='bf16' (no loss scaling).")
        if not precision.overrides("adapt_to_sharding"):
            raise ConfigurationError(
                f"mixed_precision={precision.name!r} scales the loss, and its precision class "
                f"{type(precision).__name__} cannot share its inf/nan check across FSDP2's "
                "shards (it does not override adapt_to_sharding); use mixed_precision='bf16' "
                "or 'fp16' with FSDP.")
    precision.adapt_to_sharding()


def plugin_parallelism(plugin: FullyShardedDataParallelPlugin, world: int
                       ) -> ParallelismConfig:
    """The mesh sizes an FSDP plugin's strategy implies without a ParallelismConfig:
    replicate over machines and shard within one (hybrid), replicate only (NO_SHARD) or
    shard over every process."""
    from accel_parallel.mesh.parallelism_config import ParallelismConfig

    replicate, shard = 1, world
    if plugin.replicate_only:
        replicate, shard = world, 1
    elif plugin.hybrid:
        local = local_world(world)
        if world % local:
            raise ConfigurationError(
                f"Hybrid sharding shards within a machine: {world} processes do not split "
                f"into machines of {local}; use FULL_SHARD, or the same number of "
                "processes on every machine.")
        replicate, shard = world // local, local
    return ParallelismConfig(dp_replicate_size=replicate, dp_shard_size=shard, tp_size=1,
                             cp_size=1, sp_size=1)


def apply_activation_checkpointing(modules: list[torch.nn.Module]) -> None:
    """Recompute each module's activations in backward (its forward replaced in place)."""
    for module in modules:
        if not isinstance(module.forward, CheckpointedForward):
            module.forward = CheckpointedForward(module.forward)


def ensure_process_group(state: PartialState) -> None:
    """FSDP2 runs on a process group; a single process gets one of its own (an in-memory
    store, nothing to connect to), so a sharded checkpoint of N processes loads into one."""
    import torch.distributed as dist

    if not dist.is_available():
        raise ConfigurationError(
            "FSDP needs torch.distributed, which this torch build lacks: install a torch build "
            "with distributed support, or drop the FSDP plugin.")
    if dist.is_initialized():
        return
    from accel_state.detect import backend_for_device

    dist.init_process_group(backend_for_device(state.device.type), store=dist.HashStore(),
                            rank=0, world_size=1)


def broadcast_from_main(model: torch.nn.Module, full_state: dict) -> None:
    """Fill every rank's shards (and buffers) from the main process's full state dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, full_state, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True))


@contextlib.contextmanager
def without_gradient_sync(model: Any, unsynced: set[int]) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    unsynced.add(id(model))
    try:
        yield
    finally:
        unsynced.discard(id(model))
        model.set_requires_gradient_sync(True)


@contextlib.contextmanager
def with_gradient_sync(model: Any) -> Iterator[None]:
    """Inside ``no_sync``: reduce gradients for this block, then defer again."""
    model.set_requires_gradient_sync(True)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(False)


def local_world(world: int) -> int:
    """Processes on this machine (``LOCAL_WORLD_SIZE``), else every process."""
    from accel_state import env

    return env.LOCAL_WORLD_SIZE.get_int(world) or world


def mixed_precision_policy(plugin: FullyShardedDataParallelPlugin, precision: Precision,
                           root: bool) -> Any:
    """The plugin's policy, else the precision's dtypes. Only the root unit returns fp32
    outputs (as autocast's fp32 outputs): inner units hand low-precision activations on
    to the modules of their parent, whose parameters are in that dtype."""
    if plugin.mixed_precision_policy is not None:
        return plugin.mixed_precision_policy
    param_dtype = precision.param_dtype
    if param_dtype is None:
        return fsdp2().MixedPrecisionPolicy()
    return fsdp2().MixedPrecisionPolicy(
        param_dtype=param_dtype, reduce_dtype=precision.reduce_dtype,
        output_dtype=torch.float32 if root else None)


def shard_options(plugin: FullyShardedDataParallelPlugin, precision: Precision, mesh: Any,
                  root: bool) -> dict[str, Any]:
    """``fully_shard`` arguments. The root unit is never resharded after forward (as
    torch's own default does): backward starts with it, so it would be gathered again
    at once; the plugin's ``reshard_after_forward`` applies to every inner unit."""
    reshard = plugin.reshard_after_forward and not root
    options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard,
                               "mp_policy": mixed_precision_policy(plugin, precision, root)}
    if plugin.cpu_offload:
        options["offload_policy"] = fsdp2().CPUOffloadPolicy()
    return options


def shard_model(model: torch.nn.Module, targets: list[torch.nn.Module],
                plugin: FullyShardedDataParallelPlugin, precision: Precision, mesh: Any) -> None:
    """``fully_shard`` each wrap target (children first), then the model, over ``mesh``."""
    ignored = plugin.ignored_params(model)
    extra = {"ignored_params": ignored} if ignored else {}
    fully_shard = fsdp2().fully_shard
    root = getattr(model, "_orig_mod", model)  # a compile wrapper shares the module
    for module in targets:
        fully_shard(module, **shard_options(plugin, precision, mesh, root=False), **extra)
    fully_shard(root, **shard_options(plugin, precision, mesh, root=True), **extra)


def weights_to_broadcast(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin,
                         on_meta: bool, is_main_process: bool) -> dict | None:
    """With ``sync_module_states`` (implied by ``cpu_ram_efficient_loading``) the main
    process's weights are broadcast into every rank's shards after sharding; the other
    ranks may have built the model on the meta device (no memory for the weights).
    Returns the main process's full state dict (``{}`` elsewhere), or None."""
    if not (plugin.sync_module_states or on_meta):
        return None
    if on_meta and not plugin.sync_module_states:
        raise ConfigurationError(
            "A model on the meta device has no weights to shard: set "
            "FullyShardedDataParallelPlugin(sync_module_states=True) (or "
            "cpu_ram_efficient_loading=True) so they are broadcast from the main process.")
    if on_meta and is_main_process:
        raise ConfigurationError(
            "The main process's model is on the meta device: with "
            "cpu_ram_efficient_loading / sync_module_states the weights come from the main "
            "process, so load them there (the other processes may use the meta device).")
    return model.state_dict() if is_main_process else {}

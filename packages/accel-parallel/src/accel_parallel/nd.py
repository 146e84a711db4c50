"""N-D parallelism from a ``ParallelismConfig``: TP (+SP), CP, FSDP2 / HSDP and DDP on one
named DeviceMesh, applied in one order.

Chosen when the configuration holds a ``ParallelismConfig`` (``Accelerator(
parallelism_config=...)``, ``ACCELERATE_USE_PARALLELISM_CONFIG`` with ``PARALLELISM_CONFIG_*``)
or Accelerate's deprecated ``TorchTensorParallelPlugin``. Each model goes through:

1. **tensor parallelism** over ``tp`` (``parallelize_module`` with the user's plan or the
   model's own; ``sequence_parallel`` entries shard norms/dropout over the sequence);
2. **activation checkpointing** (the FSDP plugin's ``activation_checkpointing``);
3. **compile** (the ``TorchDynamoPlugin``, in place);
4. **data parallelism**: FSDP2 over ``dp_shard`` (``dp_shard_cp`` with CP; HSDP with
   ``dp_replicate``), or — with TP/CP but no sharding — FSDP2 over ``dp_replicate`` × a
   shard dimension of size 1 (pure replication: gradients all-reduced over the
   data-parallel ranks only), or plain DDP when data parallelism is all there is.

Batches are sharded over the flattened ``dp`` dimension only, so the ranks of one TP/CP
group read the same batches.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError

from accel_parallel.ddp import join_ddp, sync_ddp_in_backward, wrap_ddp
from accel_parallel.fsdp import FSDP2Strategy, _ensure_process_group, plugin_parallelism
from accel_parallel.sequence_parallel import (
    apply_sequence_parallel,
    check_sequence_parallel_runtime,
    shard_for_sequence_parallel,
)

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import DistributedType, PartialState

    from accel_parallel.fsdp_plugin import FullyShardedDataParallelPlugin
    from accel_parallel.parallelism_config import ParallelismConfig
    from accel_parallel.selection import StrategyConfig

__all__ = ["ParallelismStrategy", "resolve_parallelism"]


def resolve_parallelism(config: ParallelismConfig | None, tp_plugin: Any, world_size: int,
                        fsdp_plugin: FullyShardedDataParallelPlugin | None = None
                        ) -> ParallelismConfig:
    """The configuration to build the mesh from: the given one, or the TP plugin's
    (``tp_size``, the rest data-parallel replicas). An all-ones configuration on several
    processes takes the FSDP plugin's mesh when one is given, else becomes DDP over all of
    them (Accelerate's rule); any other must span exactly the world, else an error naming
    every size."""
    if config is None:
        if tp_plugin is None:
            raise ConfigurationError("internal: the N-D strategy needs a ParallelismConfig")
        config = tp_plugin.to_parallelism_config()
        if world_size % config.tp_size:
            raise ConfigurationError(
                f"TorchTensorParallelPlugin(tp_size={config.tp_size}) does not divide the "
                f"{world_size} processes; use a tp_size that divides the world size.")
        config._set_size("dp_replicate", world_size // config.tp_size)
    elif tp_plugin is not None and tp_plugin.tp_size != config.tp_size:
        raise ConfigurationError(
            f"TorchTensorParallelPlugin(tp_size={tp_plugin.tp_size}) and ParallelismConfig("
            f"tp_size={config.tp_size}) disagree; pass only the ParallelismConfig.")
    if config.total_size == 1 and world_size > 1:
        implied = plugin_parallelism(fsdp_plugin, world_size) if fsdp_plugin else None
        config._set_size("dp_replicate", implied.dp_replicate_size if implied else world_size)
        config._set_size("dp_shard", implied.dp_shard_size if implied else 1)
    config.check_world_size(world_size)
    check_sequence_parallel_runtime(config)
    config._warn_unused_handlers()
    return config


def _check_plugin_agrees(config: ParallelismConfig,
                         plugin: FullyShardedDataParallelPlugin | None) -> None:
    """An FSDP plugin's sharding strategy must describe the same mesh as the sizes."""
    if plugin is None:
        return
    sizes = (f"ParallelismConfig(dp_replicate_size={config.dp_replicate_size}, "
             f"dp_shard_size={config.dp_shard_size})")
    if plugin.hybrid and not (config.dp_replicate_enabled and config.dp_shard_enabled):
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy={plugin.sharding!r}) replicates "
            f"across groups of shards, but {sizes} is not hybrid; set both sizes above 1, or use "
            "sharding_strategy='FULL_SHARD'.")
    if plugin.replicate_only and config.dp_shard_size > 1:
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy='NO_SHARD') does not shard, but "
            f"{sizes} shards over {config.dp_shard_size} processes; set dp_shard_size=1 or "
            "use sharding_strategy='FULL_SHARD'.")
    if not plugin.replicate_only and not config.fsdp_enabled and config.total_size > 1:
        raise ConfigurationError(
            f"FullyShardedDataParallelPlugin(sharding_strategy={plugin.sharding!r}) shards, but "
            f"{sizes} leaves nothing to shard over (dp_shard_size=1, cp_size=1); set "
            "dp_shard_size > 1, or drop the FSDP plugin.")


class ParallelismStrategy(FSDP2Strategy):
    """TP / CP / FSDP2 / HSDP / DDP composed on one mesh from a ``ParallelismConfig``."""

    name = "nd"
    priority = 55  # below deepspeed (60): a DeepSpeed plugin with a ParallelismConfig is ZeRO

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 parallelism: ParallelismConfig | None = None,
                 plugin: FullyShardedDataParallelPlugin | None = None,
                 tp_plugin: Any = None, ddp_kwargs: Any = None, **options: Any) -> None:
        from accel_parallel.context_parallel import check_context_parallel_device

        if parallelism is not None:  # the device first: no size makes CP run on a CPU
            check_context_parallel_device(parallelism.cp_size, state.device)
        config = resolve_parallelism(parallelism, tp_plugin, state.num_processes, plugin)
        _check_plugin_agrees(config, plugin)
        self._fsdp_requested = plugin is not None or config.fsdp_enabled
        #: whether FSDP2 does the data parallelism (sharding, or replication for TP/CP)
        self.uses_fsdp = self._fsdp_requested or (
            config.dp_replicate_enabled and (config.tp_enabled or config.cp_enabled))
        self.ddp_kwargs = ddp_kwargs
        super().__init__(state, precision=precision, plugin=plugin, parallelism=config,
                         **options)

    @classmethod
    def accepts(cls, config: StrategyConfig) -> bool:
        plugins = config.plugins
        wanted = plugins.get("parallelism_config") is not None or plugins.get("tp") is not None
        return wanted and plugins.get("deepspeed") is None

    @classmethod
    def from_config(cls, config: StrategyConfig) -> ParallelismStrategy:
        _ensure_process_group(config.state)
        plugins = config.plugins
        return cls(config.state, precision=config.precision,
                   parallelism=plugins.get("parallelism_config"), plugin=plugins.get("fsdp"),
                   tp_plugin=plugins.get("tp"), ddp_kwargs=config.handlers.get("ddp"))

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        """The mesh's config, and the FSDP2 plugin when the run is an FSDP run (as
        :attr:`distributed_type` says: sharding asked for; FSDP2 only replicating for TP/CP
        is an implementation detail of data parallelism)."""
        used: dict[str, Any] = {"parallelism_config": self.parallelism_config}
        if self._fsdp_requested:
            used["fsdp"] = self.plugin
        return used

    # -- topology ------------------------------------------------------------------------------
    def _kept_dims(self) -> tuple[str, ...]:
        return ("dp_shard",) if self.uses_fsdp else ()

    @property
    def distributed_type(self) -> DistributedType:
        """FSDP when parameters are sharded (or an FSDP plugin was given), else the
        device's multi-process type (Accelerate: TP runs as ``MULTI_GPU``)."""
        from accel_state import DistributedType

        return DistributedType.FSDP if self._fsdp_requested else self.state.distributed_type

    @property
    def parallelism_config(self) -> ParallelismConfig:
        return self.parallelism

    # -- models --------------------------------------------------------------------------------
    def parallelize(self, model: torch.nn.Module) -> None:
        """Step 1: tensor parallelism over ``tp``, then Ulysses over ``sp``: the core
        attention exchanges sequence for heads (each a no-op at size 1)."""
        config = self.parallelism
        if config.tp_enabled:
            from accel_parallel.tensor_parallel import apply_tensor_parallel

            handler = config.tp_handler
            apply_tensor_parallel(model, self._mesh.submesh("tp"),
                                  plan=getattr(handler, "tp_plan", None),
                                  enable_async_tp=bool(getattr(handler, "enable_async_tp",
                                                               False)))
        apply_sequence_parallel(model, self._mesh, config)

    def prepare_data_loader(self, dataloader: Any) -> Any:
        """With ``sp_size > 1``, a loader whose batches are this rank's sequence shards."""
        return shard_for_sequence_parallel(dataloader, self._mesh, config=self.parallelism)

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """FSDP2's order when FSDP2 does the data parallelism; otherwise TP, compile and the
        precision's autocast, then DDP over ``dp_replicate`` when that is all there is."""
        if self.uses_fsdp:
            return super().prepare_model(model, device_placement=device_placement,
                                         evaluation_mode=evaluation_mode)
        model = self.precision.convert_module(model)
        if device_placement:
            model = model.to(self.state.device)
        if not any(True for _ in model.parameters()):
            return model
        self.parallelize(model)
        config = self.parallelism
        if config.non_data_parallel_size > 1:  # (FSDP2's path broadcasts with sync_module_states)
            from accel_parallel.tensor_parallel import broadcast_unsharded

            broadcast_unsharded(model)
        model = self.compile_model(model, in_place=True)
        model = self.precision.wrap_forward(model)
        if (evaluation_mode or config.non_data_parallel_size > 1 or not config.dp_enabled
                or not any(p.requires_grad for p in model.parameters())):
            return model
        return self._ddp(model)

    def _ddp(self, model: torch.nn.Module) -> torch.nn.Module:
        return wrap_ddp(model, self.ddp_kwargs, process_group=self._mesh.dp_group)

    # -- the step ------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return super().no_sync(model)

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return sync_ddp_in_backward(model)
        return super().sync_in_backward(model)

    def join(self, joinables: list[Any], *,
             enable: bool) -> contextlib.AbstractContextManager[Any] | None:
        """torch's ``Join`` when the mesh's data-parallel step is DDP (FSDP2 has none)."""
        if self.uses_fsdp:
            return super().join(joinables, enable=enable)
        return join_ddp(joinables, enable=enable)

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """The norm of the whole gradient across every mesh its pieces live on (TP weights
        on ``tp``/2-D, the rest on ``dp_shard``), then clipped; a plain tensor."""
        from accel_parallel.tensor_parallel import clip_grad_norm_

        return clip_grad_norm_(parameters, max_norm, norm_type)

    def context_parallel(self, buffers: Any = None, buffer_seq_dims: Any = None,
                         no_restore_buffers: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Context parallelism over ``cp`` for the block (a no-op when ``cp_size`` is 1)."""
        config = self.parallelism
        if not config.cp_enabled:
            return contextlib.nullcontext()
        from accel_parallel.context_parallel import context_parallel_block

        return context_parallel_block(self._mesh.submesh("cp"), buffers, buffer_seq_dims,
                                      no_restore_buffers, config.cp_handler.cp_comm_strategy)
